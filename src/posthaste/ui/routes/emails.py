"""The emails pages: the list with the API's filters and cursor paging, and one email."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from posthaste.api.routes.emails import email_filter
from posthaste.bootstrap import Services
from posthaste.core.cursors import page_limit
from posthaste.core.models import Principal
from posthaste.core.serialize import attachment_record, attempt_record, email_record, event_record
from posthaste.errors import NotFound, ValidationError
from posthaste.ui.auth import CheckedForm, UiPrincipal
from posthaste.ui.listing import cursor_link, services_of
from posthaste.ui.live import stream_from_now
from posthaste.ui.rendering import message_html, render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)
FILTERS = ("status", "to", "from", "subject", "tag", "stream_id", "after", "before")
PAGE_SIZE = 50
RAW_SHOWN = 256 * 1024  # a longer source is cut on the page (the API serves it whole)


@router.get("/emails")
async def email_list(request: Request, principal: UiPrincipal) -> Response:
    query = request.query_params
    chosen = {name: query.get(name, "").strip() for name in FILTERS}
    cursor = query.get("cursor") or None
    since = await stream_from_now(request, principal)
    try:
        flt, anchor = email_filter(
            str(PAGE_SIZE),
            chosen["status"],
            chosen["to"],
            chosen["from"],
            chosen["subject"],
            chosen["tag"],
            chosen["stream_id"],
            after=chosen["after"],
            before=chosen["before"],
        )
        limit = page_limit(str(PAGE_SIZE), PAGE_SIZE)
        page = await services_of(request).emails.page(principal, flt, cursor, limit, anchor=anchor)
    except ValidationError as exc:
        return render(
            request, "emails.html", 422, emails=[], filters=chosen, error=exc.message, older="",
            since=since,
        )  # fmt: skip
    kept = {k: v for k, v in chosen.items() if k not in ("after", "before")}
    older = cursor_link("/ui/emails", page.next_cursor, **kept)
    return render(
        request,
        "emails.html",
        emails=[email_record(e) for e in page.items],
        filters=chosen,
        error="",
        older=older,
        first_page=cursor is None and not chosen["after"] and not chosen["before"],
        since=since,
    )


@router.get("/emails/{email_id}")
async def email_page(request: Request, email_id: str, principal: UiPrincipal) -> Response:
    services = services_of(request)
    since = await stream_from_now(request, principal)
    email = await services.emails.get(principal, email_id)
    events = await services.emails.events(principal, email_id)
    attachments, _ = await services.emails.attachments(principal, email_id)
    attempts = await services.attempts.for_email(principal, email_id)
    return render(
        request,
        "email.html",
        email=email_record(email),
        events=[event_record(e) for e in events],
        attachments=[attachment_record(a) for a in attachments],
        attempts=[attempt_record(a) for a in attempts],
        raw=await _raw_source(services, principal, email_id),
        since=since,
    )


async def _raw_source(services: Services, principal: Principal, email_id: str) -> dict[str, Any]:
    """The message as sent (its start, when long), or why there is none."""
    try:
        data = await services.emails.raw(principal, email_id)
    except NotFound as exc:
        return {"text": "", "note": exc.message}
    text = data[:RAW_SHOWN].decode("utf-8", "replace")
    note = ""
    if len(data) > RAW_SHOWN:
        note = f"Showing the first {RAW_SHOWN // 1024} KiB of {len(data)} bytes."
    return {"text": text, "note": note}


@router.post("/emails/{email_id}/cancel")
async def cancel_email(
    request: Request, email_id: str, principal: UiPrincipal, _form: CheckedForm
) -> Response:
    """Cancel a queued or scheduled email (anything further along answers why not)."""
    email = await services_of(request).email_changes.cancel(principal, email_id)
    return RedirectResponse(f"/ui/emails/{email.id}?notice=canceled", 303)


@router.get("/emails/{email_id}/html")
async def email_html(request: Request, email_id: str, principal: UiPrincipal) -> Response:
    """The email's html, framed by its page: no script, nothing remote (see MESSAGE_POLICY)."""
    email = await services_of(request).emails.get(principal, email_id)
    return message_html(email.html or "")
