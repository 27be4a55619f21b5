"""The received mail pages: the list (filtered, paged) and one message."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from posthaste.api.routes.emails import lookup_filter
from posthaste.core.cursors import page_limit
from posthaste.core.ids import format_ms
from posthaste.core.serialize import attachment_record, received_email_record
from posthaste.errors import ValidationError
from posthaste.storage.inbound import ReceivedFilter
from posthaste.ui.auth import UiPrincipal
from posthaste.ui.listing import PAGE_SIZE, cursor_link, services_of
from posthaste.ui.rendering import message_html, render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)


@router.get("/received")
async def received_list(request: Request, principal: UiPrincipal) -> Response:
    query = request.query_params
    to, from_ = query.get("to", "").strip(), query.get("from", "").strip()
    cursor = query.get("cursor") or None
    try:
        flt = ReceivedFilter(to=lookup_filter(to, "to"), from_=lookup_filter(from_, "from"))
        limit = page_limit(str(PAGE_SIZE), PAGE_SIZE)
        page = await services_of(request).received.page(principal, flt, cursor, limit)
    except ValidationError as exc:
        return render(
            request, "received.html", 422, items=[], to=to, from_=from_, error=exc.message,
            older="",
        )  # fmt: skip
    return render(
        request,
        "received.html",
        items=[received_email_record(e) for e in page.items],
        to=to,
        from_=from_,
        error="",
        older=cursor_link("/ui/received", page.next_cursor, to=to, **{"from": from_}),
    )


@router.get("/received/{email_id}")
async def received_page(request: Request, email_id: str, principal: UiPrincipal) -> Response:
    received = services_of(request).received
    item = await received.get(principal, email_id)
    attachments, _ = await received.attachments(principal, email_id)
    url, expires_at = received.raw_link(item)
    return render(
        request,
        "received_email.html",
        email=received_email_record(item),
        html=item.html,
        text=item.text,
        headers=item.headers,
        attachments=[attachment_record(a) for a in attachments],
        raw_url=url,
        raw_expires_at=format_ms(expires_at),
    )


@router.get("/received/{email_id}/html")
async def received_html(request: Request, email_id: str, principal: UiPrincipal) -> Response:
    item = await services_of(request).received.get(principal, email_id)
    return message_html(item.html or "")
