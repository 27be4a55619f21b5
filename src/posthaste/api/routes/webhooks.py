"""/webhooks: endpoints, their secrets, their events, attempts and replays."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.webhooks import (
    CreateWebhookRequest,
    UpdateWebhookRequest,
    WebhookAttemptList,
    WebhookEventList,
    WebhookEventRecord,
    WebhookList,
    WebhookRecord,
    WebhookWithSecret,
)
from posthaste.api.streamed import streamed_listing
from posthaste.bootstrap import Services
from posthaste.core.cursors import page_of
from posthaste.core.models import Principal
from posthaste.core.webhook_requests import parse_new_webhook, parse_webhook_changes
from posthaste.core.webhooks import attempt_record, delivery_record, webhook_record

AFTER = "A webhook id: the page after it, in the list's order"
BEFORE = "A webhook id: the page before it, in the list's order"
EVENT_AFTER = "An event id of this webhook: the page after it (older events)"
EVENT_BEFORE = "An event id of this webhook: the page before it (newer events)"
ATTEMPT_AFTER = "An attempt id of this event: the page after it (later attempts)"
ATTEMPT_BEFORE = "An attempt id of this event: the page before it (earlier attempts)"

router = APIRouter(tags=["webhooks"])


def _with_secret(record: dict[str, Any], secret: str) -> dict[str, Any]:
    """The secret under our name and Resend's (``signing_secret``): one value."""
    return {**record, "secret": secret, "signing_secret": secret}


@router.post(
    "/webhooks",
    status_code=201,
    summary="Create a webhook endpoint (its secret is shown only here)",
    responses={201: {"model": WebhookWithSecret}, **ERRORS},
    openapi_extra=body_schema(CreateWebhookRequest),
)
async def create_webhook(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    new = parse_new_webhook(json_object(body))
    hook, secret = await services.webhooks.create(principal, new)
    return json_response(_with_secret(webhook_record(hook), secret), 201)


@router.get(
    "/webhooks",
    summary="List webhook endpoints (never their secrets), oldest first: the full set, or a page "
    "with limit, after or before",
    responses={200: {"model": WebhookList}, **ERRORS},
)
async def list_webhooks(
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    if request is None:
        return page([webhook_record(h) for h in await services.webhooks.all(principal)], False)
    items, more = await services.webhooks.page(principal, request)
    return page([webhook_record(h) for h in items], more)


@router.get(
    "/webhooks/{webhook_id}",
    summary="Get a webhook endpoint",
    responses={200: {"model": WebhookRecord}, **ERRORS},
)
async def get_webhook(webhook_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(webhook_record(await services.webhooks.get(principal, webhook_id)))


@router.patch(
    "/webhooks/{webhook_id}",
    summary="Change a webhook's endpoint, events or enabled flag",
    responses={200: {"model": WebhookRecord}, **ERRORS},
    openapi_extra=body_schema(UpdateWebhookRequest),
)
async def update_webhook(
    webhook_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    changes = parse_webhook_changes(json_object(body))
    hook = await services.webhooks.update(principal, webhook_id, changes)
    return json_response(webhook_record(hook))


@router.delete(
    "/webhooks/{webhook_id}",
    summary="Delete a webhook endpoint, its pending deliveries and its history",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_webhook(
    webhook_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    await services.webhooks.delete(principal, webhook_id)
    return deleted("webhook", webhook_id)


@router.post(
    "/webhooks/{webhook_id}/secret/rotate",
    summary="Make a new signing secret; the old one also signs for 24 hours",
    responses={200: {"model": WebhookWithSecret}, **ERRORS},
)
@router.post(
    "/webhooks/{webhook_id}/signing-secret/rotate",
    summary="Resend's path for rotating the signing secret (same as /secret/rotate)",
    responses={200: {"model": WebhookWithSecret}, **ERRORS},
)
async def rotate_secret(
    webhook_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    hook, secret = await services.webhooks.rotate_secret(principal, webhook_id)
    return json_response(_with_secret(webhook_record(hook), secret))


@router.get(
    "/webhooks/{webhook_id}/events",
    summary="The endpoint's events, newest first, with their delivery status: all of them, or "
    "a page with limit, after or before",
    responses={200: {"model": WebhookEventList}, **ERRORS},
)
async def list_webhook_events(
    webhook_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    if request is not None:
        items, more = await services.webhooks.deliveries_page(principal, webhook_id, request)
        return page([delivery_record(d) for d in items], more)
    await services.webhooks.get(principal, webhook_id)  # a missing webhook is a 404 up front
    records = _event_records(services, principal, webhook_id)
    return await streamed_listing(records, has_more=False)


async def _event_records(
    services: Services, principal: Principal, webhook_id: str
) -> AsyncIterator[dict[str, Any]]:
    async for item in services.webhooks.deliveries(principal, webhook_id):
        yield delivery_record(item)


@router.get(
    "/webhooks/{webhook_id}/events/{event_id}",
    summary="One event of the endpoint, with its payload and delivery status",
    responses={200: {"model": WebhookEventRecord}, **ERRORS},
)
async def get_webhook_event(
    webhook_id: str, event_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    item = await services.webhooks.delivery(principal, webhook_id, event_id)
    return json_response(delivery_record(item))


@router.get(
    "/webhooks/{webhook_id}/events/{event_id}/attempts",
    summary="Every delivery attempt of one event to this endpoint, oldest first (or a page "
    "with limit, after or before)",
    responses={200: {"model": WebhookAttemptList}, **ERRORS},
)
async def list_attempts(
    webhook_id: str,
    event_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    items = await services.webhooks.attempts(principal, webhook_id, event_id)
    more = False
    if request is not None:
        items, more = page_of(items, request, lambda a: a.id, "attempts of this event")
    return page([attempt_record(a) for a in items], more)


@router.post(
    "/webhooks/{webhook_id}/events/{event_id}/replay",
    summary="Deliver an event again at once, with the same webhook-id",
    responses={200: {"model": WebhookEventRecord}, **ERRORS},
)
async def replay_event(
    webhook_id: str, event_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    item = await services.webhooks.replay(principal, webhook_id, event_id)
    return json_response(delivery_record(item))
