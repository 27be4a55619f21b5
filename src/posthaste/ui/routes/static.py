"""The dashboard's two files: its stylesheet and its live-update script."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.errors import NotFound
from posthaste.ui.rendering import HERE
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)
FILES = {"dashboard.css": "text/css", "live.js": "text/javascript"}


@router.get("/static/{name}")
async def static_file(name: str) -> Response:
    media_type = FILES.get(name)
    if media_type is None:
        raise NotFound(f"No dashboard file {name!r}.")
    body = (HERE / "static" / name).read_bytes()
    return Response(
        body,
        media_type=f"{media_type}; charset=utf-8",
        headers={"Cache-Control": "public, max-age=300"},
    )
