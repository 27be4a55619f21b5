"""/broadcasts: drafts created, listed, read, edited and deleted; sent (or scheduled) and
cancelled. Resend's shapes work too (``audience_id``, ``send: true`` on create)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import (
    FullPrincipal,
    JsonBody,
    OptionalJsonObject,
    ResendPage,
    ServicesDep,
    json_object,
)
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.schemas.broadcasts import (
    BroadcastList,
    BroadcastRecord,
    BroadcastRequest,
    CreateBroadcastRequest,
    SendBroadcastRequest,
)
from posthaste.api.schemas.common import Deleted
from posthaste.api.streamed import streamed_listing
from posthaste.core.broadcasts import parse_broadcast, parse_send_order, wants_send
from posthaste.core.ids import now_ms
from posthaste.core.models import Principal
from posthaste.core.serialize import broadcast_record
from posthaste.services.broadcasts import BroadcastService

router = APIRouter(tags=["broadcasts"])
ONE = {200: {"model": BroadcastRecord}, **ERRORS}


@router.post(
    "/broadcasts",
    status_code=201,
    summary="Create a broadcast: a draft, or sent at once with send: true (scheduled_at: later)",
    responses={201: {"model": BroadcastRecord}, **ERRORS},
    openapi_extra=body_schema(CreateBroadcastRequest),
)
async def create_broadcast(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    fields = json_object(body)
    now = now_ms()
    content = parse_broadcast(fields, now)
    order = parse_send_order(fields, now) if wants_send(fields) else None
    created = await services.broadcasts.create(principal, content, order)
    return json_response(broadcast_record(created), 201)


@router.get(
    "/broadcasts",
    summary="List broadcasts, newest first: the full set, or a page with limit, after or before",
    responses={200: {"model": BroadcastList}, **ERRORS},
)
async def list_broadcasts(
    principal: FullPrincipal, services: ServicesDep, request: ResendPage
) -> Response:
    if request is None:
        return await streamed_listing(_records(services.broadcasts, principal), has_more=False)
    items, more = await services.broadcasts.page(principal, request)
    return page([broadcast_record(b) for b in items], more)


async def _records(
    broadcasts: BroadcastService, principal: Principal
) -> AsyncIterator[dict[str, Any]]:
    async for item in broadcasts.stream(principal):
        yield broadcast_record(item)


@router.get("/broadcasts/{broadcast_id}", summary="Get a broadcast with its counts", responses=ONE)
async def get_broadcast(
    broadcast_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    return json_response(broadcast_record(await services.broadcasts.get(principal, broadcast_id)))


@router.patch(
    "/broadcasts/{broadcast_id}",
    summary="Edit a draft broadcast (409 once it is sent)",
    responses=ONE,
    openapi_extra=body_schema(BroadcastRequest),
)
async def update_broadcast(
    broadcast_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    updated = await services.broadcasts.update(principal, broadcast_id, json_object(body))
    return json_response(broadcast_record(updated))


@router.delete(
    "/broadcasts/{broadcast_id}",
    summary="Delete a draft broadcast (409 once it is sent)",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_broadcast(
    broadcast_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    removed = await services.broadcasts.delete(principal, broadcast_id)
    return deleted("broadcast", removed.id)


@router.post(
    "/broadcasts/{broadcast_id}/send",
    summary="Send a draft broadcast now, or at scheduled_at",
    responses=ONE,
    openapi_extra=body_schema(SendBroadcastRequest),
)
async def send_broadcast(
    broadcast_id: str, principal: FullPrincipal, services: ServicesDep, body: OptionalJsonObject
) -> Response:
    order = parse_send_order(body, now_ms())
    sent = await services.broadcasts.send(principal, broadcast_id, order)
    return json_response(broadcast_record(sent))


@router.post(
    "/broadcasts/{broadcast_id}/cancel",
    summary="Cancel a scheduled or sending broadcast: members not yet mailed are not mailed",
    responses=ONE,
)
async def cancel_broadcast(
    broadcast_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    cancelled = await services.broadcasts.cancel(principal, broadcast_id)
    return json_response(broadcast_record(cancelled))
