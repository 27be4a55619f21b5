"""The webhooks pages: endpoints, their events with delivery status, an event's attempts, and
replaying an event."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from posthaste.core.webhooks import attempt_record, delivery_record, webhook_record
from posthaste.ui.auth import CheckedForm, UiPrincipal
from posthaste.ui.listing import id_page, next_link, services_of
from posthaste.ui.rendering import render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)


@router.get("/webhooks")
async def webhook_list(request: Request, principal: UiPrincipal) -> Response:
    items, more = await services_of(request).webhooks.page(principal, id_page(request))
    return render(
        request,
        "webhooks.html",
        webhooks=[webhook_record(h) for h in items],
        older=next_link("/ui/webhooks", items, more),
    )


@router.get("/webhooks/{webhook_id}")
async def webhook_page(request: Request, webhook_id: str, principal: UiPrincipal) -> Response:
    webhooks = services_of(request).webhooks
    hook = await webhooks.get(principal, webhook_id)
    items, more = await webhooks.deliveries_page(principal, webhook_id, id_page(request))
    older = ""
    if more and items:
        older = f"/ui/webhooks/{hook.id}?after={items[-1].event_id}"
    return render(
        request,
        "webhook.html",
        webhook=webhook_record(hook),
        events=[delivery_record(d) for d in items],
        older=older,
    )


@router.get("/webhooks/{webhook_id}/events/{event_id}")
async def webhook_event(
    request: Request, webhook_id: str, event_id: str, principal: UiPrincipal
) -> Response:
    webhooks = services_of(request).webhooks
    hook = await webhooks.get(principal, webhook_id)
    delivery = await webhooks.delivery(principal, webhook_id, event_id)
    attempts = await webhooks.attempts(principal, webhook_id, event_id)
    return render(
        request,
        "webhook_event.html",
        webhook=webhook_record(hook),
        event=delivery_record(delivery),
        attempts=[attempt_record(a) for a in attempts],
    )


@router.post("/webhooks/{webhook_id}/events/{event_id}/replay")
async def replay_event(
    request: Request, webhook_id: str, event_id: str, principal: UiPrincipal, _form: CheckedForm
) -> Response:
    replayed = await services_of(request).webhooks.replay(principal, webhook_id, event_id)
    return RedirectResponse(
        f"/ui/webhooks/{replayed.webhook_id}/events/{replayed.event_id}?notice=replayed", 303
    )
