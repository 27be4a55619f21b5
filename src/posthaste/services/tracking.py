"""Opens and clicks: the public tracking links read back and recorded as ``email.opened`` and
``email.clicked`` events (no key; the signed token is the credential).

A token that is not genuine is ``NotFound`` and records nothing, before any database work. A
genuine one is answered at once (the pixel, the redirect to the URL the token carries) and its
event is written after the answer: hits wait in a list, one writer task takes them after
``linger`` (10 ms) and writes up to ``BATCH`` in one transaction. A hit costs the request an
append, not a task or a transaction of its own; the events' own timestamps are the hits'; and
neither a slow database nor one that is down delays or breaks a recipient's click (a failed
batch is logged and its hits are not recorded). The events go through the event log
(``storage/events.py``), so webhooks and the live stream get them; the email's status and
``last_event`` do not change.

What is recorded is bounded by ``TrackingThrottle`` (``core/tracking_throttle.py``) and by
``max_pending`` hits waiting (beyond it, hits are counted in ``dropped`` and logged, not
kept): fetching a genuine link in a loop costs memory and writes that do not grow with the
loop. A process that stops writes what is waiting (``close``); one killed loses at most the
hits of its last moments.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from posthaste.core.events import EventType
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import EmailSummary, Event
from posthaste.core.serialize import email_event_data
from posthaste.core.tracking import TrackedEmail, TrackingLinks
from posthaste.core.tracking_throttle import TrackingThrottle
from posthaste.errors import NotFound
from posthaste.storage import emails as emails_repo
from posthaste.storage import events as events_repo
from posthaste.storage.database import Database

log = logging.getLogger(__name__)

MAX_PENDING = 10_000
BATCH = 500  # hits per transaction at most
LINGER_SECONDS = 0.01  # how long the first hit waits for others to share its transaction
MAX_USER_AGENT = 512  # characters kept of a User-Agent


@dataclass(frozen=True)
class Visitor:
    """Who fetched a link, as the HTTP connection says: the peer address and User-Agent."""

    ip_address: str | None
    user_agent: str | None


@dataclass(frozen=True)
class _Hit:
    kind: EventType
    tracked: TrackedEmail
    visitor: Visitor
    at: int


class TrackingService:
    def __init__(
        self,
        db: Database,
        links: TrackingLinks,
        throttle: TrackingThrottle | None = None,
        *,
        max_pending: int = MAX_PENDING,
        linger: float = LINGER_SECONDS,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.db = db
        self.links = links
        self.throttle = throttle or TrackingThrottle()
        self.max_pending = max_pending
        self.linger = linger
        self.clock = clock
        self.dropped = 0
        self._waiting: list[_Hit] = []
        self._writer: asyncio.Task[None] | None = None

    def opened(self, token: str, visitor: Visitor) -> None:
        """Record an open of the pixel ``token`` names; ``NotFound`` if it is not genuine."""
        tracked = self.links.read_open(token)
        if tracked is None:
            raise NotFound("This tracking link is not valid.")
        self._record(EventType.EMAIL_OPENED, tracked, visitor)

    def clicked(self, token: str, visitor: Visitor) -> str:
        """Record a click of the link ``token`` names and return its original URL (the only
        place the redirect may go); ``NotFound`` if it is not genuine."""
        tracked = self.links.read_click(token)
        if tracked is None or tracked.url is None:
            raise NotFound("This tracking link is not valid.")
        self._record(EventType.EMAIL_CLICKED, tracked, visitor)
        return tracked.url

    async def flush(self) -> None:
        """Wait until every hit taken so far is written (or has failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])

    async def close(self) -> None:
        await self.flush()

    def _record(self, kind: EventType, tracked: TrackedEmail, visitor: Visitor) -> None:
        key = (kind, tracked.team_id, tracked.email_id, visitor.ip_address, tracked.url)
        if not self.throttle.admit(key, tracked.email_id):
            return
        if len(self._waiting) >= self.max_pending:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("tracking: %d hits left unrecorded (writes behind)", self.dropped)
            return
        self._waiting.append(_Hit(kind, tracked, visitor, self.clock()))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_waiting())

    async def _write_waiting(self) -> None:
        while self._waiting:
            if len(self._waiting) < BATCH:
                await asyncio.sleep(self.linger)
            batch, self._waiting = self._waiting[:BATCH], self._waiting[BATCH:]
            try:
                await self._write(batch)
            except Exception:
                log.exception("tracking: %d events could not be recorded", len(batch))

    async def _write(self, hits: list[_Hit]) -> None:
        keys = [(hit.tracked.team_id, hit.tracked.email_id) for hit in hits]
        async with self.db.transaction() as tx:
            found = await emails_repo.email_summaries(tx, keys)
            events = [
                _event(hit, email)
                for hit, key in zip(hits, keys, strict=True)
                if (email := found.get(key)) is not None
            ]
            await events_repo.insert_events(tx, events)


def _event(hit: _Hit, email: EmailSummary) -> Event:
    visitor = hit.visitor
    user_agent = None if visitor.user_agent is None else visitor.user_agent[:MAX_USER_AGENT]
    seen = {"ip_address": visitor.ip_address, "user_agent": user_agent}
    if hit.kind is EventType.EMAIL_CLICKED:
        data = email_event_data(email, click={"link": hit.tracked.url, **seen})
    else:
        data = email_event_data(email, open=seen)
    return Event(new_id(), email.team_id, hit.kind, email.id, hit.at, data)
