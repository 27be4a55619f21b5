"""/events: custom events defined with a schema of their payloads (Resend's Events calls),
created, listed, read and edited by id or name, and deleted. ``POST /events/send`` and
``GET /events/stream`` are their own routes, registered before these."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.event_definitions import (
    CreateEventDefinitionRequest,
    EventDefinitionList,
    EventDefinitionRecord,
    UpdateEventDefinitionRequest,
)
from posthaste.api.streamed import streamed_listing
from posthaste.core.event_definitions import parse_new_event_definition, parse_schema_change
from posthaste.core.models import Principal
from posthaste.core.serialize import event_definition_record
from posthaste.services.event_definitions import EventDefinitionService

router = APIRouter(tags=["automations"])
ONE = {200: {"model": EventDefinitionRecord}, **ERRORS}


@router.post(
    "/events",
    status_code=201,
    summary="Define a custom event, with an optional schema its payloads are checked against",
    responses={201: {"model": EventDefinitionRecord}, **ERRORS},
    openapi_extra=body_schema(CreateEventDefinitionRequest),
)
async def create_event(principal: FullPrincipal, services: ServicesDep, body: JsonBody) -> Response:
    new = parse_new_event_definition(json_object(body))
    definition = await services.event_definitions.create(principal, new)
    return json_response(event_definition_record(definition), 201)


@router.get(
    "/events",
    summary="List defined events, oldest first: the full set, or a page (limit, after, before)",
    responses={200: {"model": EventDefinitionList}, **ERRORS},
)
async def list_events(
    principal: FullPrincipal, services: ServicesDep, request: ResendPage
) -> Response:
    if request is None:
        return await streamed_listing(
            _records(services.event_definitions, principal), has_more=False
        )
    items, more = await services.event_definitions.page(principal, request)
    return page([event_definition_record(d) for d in items], more)


async def _records(
    definitions: EventDefinitionService, principal: Principal
) -> AsyncIterator[dict[str, Any]]:
    async for definition in definitions.stream(principal):
        yield event_definition_record(definition)


@router.get("/events/{event_ref}", summary="Get a defined event by id or name", responses=ONE)
async def get_event(event_ref: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    definition = await services.event_definitions.get(principal, event_ref)
    return json_response(event_definition_record(definition))


@router.patch(
    "/events/{event_ref}",
    summary="Replace a defined event's schema (null clears it); its name is fixed",
    responses=ONE,
    openapi_extra=body_schema(UpdateEventDefinitionRequest),
)
async def update_event(
    event_ref: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    schema = parse_schema_change(json_object(body))
    definition = await services.event_definitions.update(principal, event_ref, schema)
    return json_response(event_definition_record(definition))


@router.delete(
    "/events/{event_ref}",
    summary="Delete a defined event (it can still be sent, with any payload)",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_event(event_ref: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    removed = await services.event_definitions.delete(principal, event_ref)
    return deleted("event", removed.id)
