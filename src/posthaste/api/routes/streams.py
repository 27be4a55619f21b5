"""/streams: a team's message streams, created, listed, renamed and deleted."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, listing
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.streams import (
    CreateStreamRequest,
    StreamList,
    StreamRecord,
    UpdateStreamRequest,
)
from posthaste.core.serialize import stream_record
from posthaste.core.streams import parse_new_stream, parse_stream_changes

router = APIRouter()


@router.post(
    "/streams",
    status_code=201,
    tags=["streams"],
    summary="Create a message stream",
    responses={201: {"model": StreamRecord}, **ERRORS},
    openapi_extra=body_schema(CreateStreamRequest),
)
async def create_stream(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    stream = await services.streams.create(principal, parse_new_stream(json_object(body)))
    return json_response(stream_record(stream), 201)


@router.get(
    "/streams",
    tags=["streams"],
    summary="List message streams",
    responses={200: {"model": StreamList}, **ERRORS},
)
async def list_streams(principal: FullPrincipal, services: ServicesDep) -> Response:
    return listing([stream_record(s) for s in await services.streams.all(principal)])


@router.get(
    "/streams/{stream_id}",
    tags=["streams"],
    summary="Get a message stream",
    responses={200: {"model": StreamRecord}, **ERRORS},
)
async def get_stream(stream_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(stream_record(await services.streams.get(principal, stream_id)))


@router.patch(
    "/streams/{stream_id}",
    tags=["streams"],
    summary="Rename a message stream or choose its IP pool",
    responses={200: {"model": StreamRecord}, **ERRORS},
    openapi_extra=body_schema(UpdateStreamRequest),
)
async def update_stream(
    stream_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    changes = parse_stream_changes(json_object(body))
    stream = await services.streams.update(principal, stream_id, changes)
    return json_response(stream_record(stream))


@router.delete(
    "/streams/{stream_id}",
    tags=["streams"],
    summary="Delete a message stream",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_stream(
    stream_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    await services.streams.delete(principal, stream_id)
    return deleted("stream", stream_id)
