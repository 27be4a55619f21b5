"""/events/stream: the team's events live, as Server-Sent Events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from starlette.responses import Response, StreamingResponse

from posthaste.api.deps import FullPrincipal, ServicesDep
from posthaste.api.openapi import ERRORS, comma_separated
from posthaste.core.webhook_requests import parse_event_types
from posthaste.core.webhooks import EVENT_TYPES

router = APIRouter(tags=["events"])

STREAM_DESCRIPTION = (
    "`text/event-stream`: per event `id:` (the event id), `event:` (its type) and `data:` (the "
    "webhook envelope `{type, created_at, data}`); comment lines as heartbeats. Send "
    "`Last-Event-ID` to resume right after that event (within retention)."
)


@router.get(
    "/events/stream",
    summary="Live event stream (Server-Sent Events)",
    description=STREAM_DESCRIPTION,
    responses={200: {"content": {"text/event-stream": {}}}, **ERRORS},
)
async def event_stream(
    principal: FullPrincipal,
    services: ServicesDep,
    types: Annotated[
        str | None,
        Query(
            description="Comma-separated event types",
            json_schema_extra=comma_separated(*EVENT_TYPES),
        ),
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    wanted = parse_event_types([t.strip() for t in types.split(",")], "types") if types else None
    stream = services.event_stream
    start = await stream.start(principal.team_id, last_event_id)
    return StreamingResponse(
        stream.frames(principal.team_id, start, wanted),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
