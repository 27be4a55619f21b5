"""The destinations page: the throttle of direct-to-MX delivery, as ``GET /destinations`` shows it
(machine-wide, no team's data: the receivers' names, their state and recent replies)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from posthaste.core.serialize import destination_record
from posthaste.ui.auth import UiPrincipal
from posthaste.ui.listing import services_of
from posthaste.ui.rendering import render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)


@router.get("/destinations")
async def destination_list(request: Request, principal: UiPrincipal) -> Response:
    views = await services_of(request).destinations.list(recent=5)
    return render(request, "destinations.html", destinations=[destination_record(v) for v in views])
