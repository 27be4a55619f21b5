"""The suppressions page: the list (filtered, paged), adding an address and removing one."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from posthaste.core.cursors import page_limit
from posthaste.core.models import Principal
from posthaste.core.serialize import suppression_record
from posthaste.core.suppressions import (
    SUPPRESSION_ORIGINS,
    parse_suppressed_addresses,
    parse_suppression_origin,
)
from posthaste.errors import ValidationError
from posthaste.ui.auth import CheckedForm, UiPrincipal, form_text
from posthaste.ui.listing import PAGE_SIZE, cursor_link, services_of
from posthaste.ui.rendering import render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)
ORIGINS = tuple(sorted(SUPPRESSION_ORIGINS))


@router.get("/suppressions")
async def suppression_list(request: Request, principal: UiPrincipal) -> Response:
    return await _page(request, principal)


@router.post("/suppressions")
async def add_suppression(request: Request, principal: UiPrincipal, form: CheckedForm) -> Response:
    try:
        addresses = parse_suppressed_addresses([form_text(form, "email")])
    except ValidationError as exc:
        return await _page(request, principal, error=exc.message, status_code=422)
    await services_of(request).suppressions.add_many(principal, addresses)
    return RedirectResponse("/ui/suppressions?notice=suppressed", 303)


@router.post("/suppressions/{suppression_id}/remove")
async def remove_suppression(
    request: Request, suppression_id: str, principal: UiPrincipal, _form: CheckedForm
) -> Response:
    await services_of(request).suppressions.remove(principal, suppression_id)
    return RedirectResponse("/ui/suppressions?notice=unsuppressed", 303)


async def _page(
    request: Request, principal: Principal, *, error: str = "", status_code: int = 200
) -> Response:
    query = request.query_params
    origin, email = query.get("origin", "").strip(), query.get("email", "").strip()
    cursor = query.get("cursor") or None
    try:
        wanted = parse_suppression_origin(origin or None)
        page = await services_of(request).suppressions.page(
            principal, wanted, email or None, cursor, page_limit(str(PAGE_SIZE), PAGE_SIZE)
        )
    except ValidationError as exc:
        return render(
            request, "suppressions.html", 422, items=[], origin=origin, email=email,
            origins=ORIGINS, error=exc.message, older="",
        )  # fmt: skip
    older = cursor_link("/ui/suppressions", page.next_cursor, origin=origin, email=email)
    return render(
        request,
        "suppressions.html",
        status_code,
        items=[suppression_record(s) for s in page.items],
        origin=origin,
        email=email,
        origins=ORIGINS,
        error=error,
        older=older,
    )
