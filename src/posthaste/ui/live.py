"""Where a page's live updates start: the event stream's position when the page was read.

A page reads "now" in the stream before it reads its data, and hands that position to its
script as a signed token; the script's stream starts there. So an event recorded while the page
was being read or its script was connecting is not lost (it may come twice: the page may show it
already, and the script keeps the first). The token names the team, so it opens no other team's
stream; a reconnecting browser sends ``Last-Event-ID`` instead, which wins.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request

from posthaste.core.crypto import Keys, TokenSigner
from posthaste.core.ids import now_ms
from posthaste.core.models import Principal
from posthaste.services.event_stream import StreamStart
from posthaste.ui.listing import services_of

# A page's script connects within seconds; a token this old (a tab left open, reconnecting
# before any event came) starts at "now" instead of replaying hours of the team's events.
TOKEN_MS = 10 * 60 * 1000


class StreamTokens:
    def __init__(self, secret_key: Keys) -> None:
        self._signer = TokenSigner(secret_key, "ui-stream-start")

    def issue(self, team_id: str, start: StreamStart, now: int) -> str:
        number, event_id = start.position
        payload = [team_id, now, number, event_id, sorted(start.already)]
        return self._signer.sign(orjson.dumps(payload))

    def read(self, token: str, team_id: str, now: int) -> StreamStart | None:
        """The start a genuine, recent token of this team names, else None."""
        payload = self._signer.verify(token)
        if payload is None:
            return None
        try:
            team, issued, number, event_id, already = orjson.loads(payload)
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return None
        if team != team_id or not isinstance(issued, int) or not 0 <= now - issued < TOKEN_MS:
            return None
        if not isinstance(number, int) or not isinstance(event_id, str):
            return None
        return StreamStart((number, event_id), frozenset(str(e) for e in already))


def stream_tokens(request: Request) -> StreamTokens:
    tokens: StreamTokens = request.app.state.ui_stream_tokens
    return tokens


async def stream_from_now(request: Request, principal: Principal) -> str:
    """The token a page hands its script: the stream's "now", read before the page's data."""
    start = await services_of(request).event_stream.start(principal.team_id, None)
    return stream_tokens(request).issue(principal.team_id, start, now_ms())
