"""The dashboard's live updates: the team's email events as Server-Sent Events, read by
``static/live.js`` (the only script of the dashboard; every page works without it)."""

from __future__ import annotations

from fastapi import APIRouter, Header, Request
from starlette.responses import Response, StreamingResponse

from posthaste.core.ids import now_ms
from posthaste.ui.auth import UiPrincipal
from posthaste.ui.listing import services_of
from posthaste.ui.live import stream_tokens
from posthaste.ui.rendering import ENV
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)
EMAIL_EVENTS = tuple(str(ENV.globals["live_event_types"]).split(","))


@router.get("/events/stream")
async def live_events(
    request: Request,
    principal: UiPrincipal,
    since: str = "",
    last_event_id: str | None = Header(default=None, alias="Last-Event-ID"),
) -> Response:
    stream = services_of(request).event_stream
    start = None
    if since and not last_event_id:
        start = stream_tokens(request).read(since, principal.team_id, now_ms())
    if start is None:
        start = await stream.start(principal.team_id, last_event_id)
    return StreamingResponse(
        stream.frames(principal.team_id, start, EMAIL_EVENTS),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
