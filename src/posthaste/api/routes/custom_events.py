"""POST /events/send: a custom event for one contact, which starts the automations it
triggers and resumes the contact's runs waiting for it."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import json_response
from posthaste.api.schemas.automations import SendEventRequest, SentEvent
from posthaste.core.automation_runs import parse_custom_event

router = APIRouter(tags=["automations"])


@router.post(
    "/events/send",
    status_code=202,
    summary="Send a custom event for a contact (an address that is no contact yet becomes one)",
    responses={202: {"model": SentEvent}, **ERRORS},
    openapi_extra=body_schema(SendEventRequest),
)
async def send_event(principal: FullPrincipal, services: ServicesDep, body: JsonBody) -> Response:
    event = parse_custom_event(json_object(body))
    await services.automations.send_event(principal, event)
    return json_response({"object": "event", "event": event.name}, 202)
