"""/segments and a contact's memberships: segments created, listed, read, renamed and deleted
(their contacts stay); contacts added to and removed from them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.routes.contacts import contact_listing
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.contacts import ContactList
from posthaste.api.schemas.segments import SegmentList, SegmentRecord, SegmentRequest
from posthaste.api.streamed import streamed_listing
from posthaste.core.models import Principal
from posthaste.core.segments import parse_segment_name
from posthaste.core.serialize import segment_record
from posthaste.services.segments import SegmentService

AFTER = "A segment id: the page after it, in the list's order"
BEFORE = "A segment id: the page before it, in the list's order"

router = APIRouter(tags=["segments"])
ONE = {200: {"model": SegmentRecord}, **ERRORS}


@router.post(
    "/segments",
    status_code=201,
    summary="Create a segment",
    responses={201: {"model": SegmentRecord}, **ERRORS},
    openapi_extra=body_schema(SegmentRequest),
)
async def create_segment(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    name = parse_segment_name(json_object(body).get("name"))
    return json_response(segment_record(await services.segments.create(principal, name)), 201)


@router.get(
    "/segments",
    summary="List segments, oldest first: the full set, or a page with limit, after or before",
    responses={200: {"model": SegmentList}, **ERRORS},
)
async def list_segments(
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    if request is None:
        return await streamed_listing(_records(services.segments, principal), has_more=False)
    items, more = await services.segments.page(principal, request)
    return page([segment_record(s) for s in items], more)


async def _records(segments: SegmentService, principal: Principal) -> AsyncIterator[dict[str, Any]]:
    async for segment in segments.stream(principal):
        yield segment_record(segment)


@router.get("/segments/{segment_id}", summary="Get a segment", responses=ONE)
async def get_segment(segment_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(segment_record(await services.segments.get(principal, segment_id)))


@router.patch(
    "/segments/{segment_id}",
    summary="Rename a segment",
    responses=ONE,
    openapi_extra=body_schema(SegmentRequest),
)
async def rename_segment(
    segment_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    name = parse_segment_name(json_object(body).get("name"))
    return json_response(
        segment_record(await services.segments.rename(principal, segment_id, name))
    )


@router.delete(
    "/segments/{segment_id}",
    summary="Delete a segment (its contacts stay)",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_segment(
    segment_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    removed = await services.segments.delete(principal, segment_id)
    return deleted("segment", removed.id)


@router.get(
    "/segments/{segment_id}/contacts",
    summary="List a segment's contacts, oldest first: the full set, or a page",
    responses={200: {"model": ContactList}, **ERRORS},
)
async def list_segment_contacts(
    segment_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    return await contact_listing(services.contacts, principal, segment_id, request)


@router.post(
    "/contacts/{contact_id}/segments/{segment_id}",
    summary="Add a contact (id or address) to a segment; adding it again changes nothing",
    responses=ONE,
)
async def add_contact_to_segment(
    contact_id: str, segment_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    segment = await services.segments.add_contact(principal, contact_id, segment_id)
    return json_response(segment_record(segment))


@router.delete(
    "/contacts/{contact_id}/segments/{segment_id}",
    summary="Remove a contact (id or address) from a segment",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def remove_contact_from_segment(
    contact_id: str, segment_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    segment = await services.segments.remove_contact(principal, contact_id, segment_id)
    return deleted("segment", segment.id)


@router.get(
    "/contacts/{contact_id}/segments",
    summary="The segments a contact (id or address) is in, oldest first",
    responses={200: {"model": SegmentList}, **ERRORS},
)
async def list_contact_segments(
    contact_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    items, more = await services.segments.of_contact(principal, contact_id, request)
    return page([segment_record(s) for s in items], more)
