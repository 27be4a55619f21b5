"""The broadcasts page: each broadcast with its status and counts."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from posthaste.core.serialize import broadcast_record
from posthaste.ui.auth import UiPrincipal
from posthaste.ui.listing import id_page, next_link, services_of
from posthaste.ui.rendering import render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)


@router.get("/broadcasts")
async def broadcast_list(request: Request, principal: UiPrincipal) -> Response:
    items, more = await services_of(request).broadcasts.page(principal, id_page(request))
    return render(
        request,
        "broadcasts.html",
        broadcasts=[broadcast_record(b) for b in items],
        older=next_link("/ui/broadcasts", items, more),
    )
