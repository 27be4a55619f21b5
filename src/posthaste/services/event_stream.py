"""The live event stream (``GET /events/stream``): Server-Sent Events of one team's events.

Each connection reads the team's events after its position (see ``storage/events.py`` for why
the position is commit-safe), woken by the database when any event is recorded (LISTEN/NOTIFY on
PostgreSQL, so events recorded by a worker process reach an API process), with a short poll as
a safety net (a PostgreSQL event held back behind a longer transaction, or a second process on
one SQLite file). ``Last-Event-ID`` names the last event received; the stream resumes right
after it, so nothing is lost while the client reconnects (within retention).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import orjson

from posthaste.core.models import Event
from posthaste.core.webhooks import envelope
from posthaste.storage import events as events_repo
from posthaste.storage.database import EVENTS_CHANNEL, Database

HEARTBEAT = b": keep-alive\n\n"
_RECHECK_FIRST = 0.05
_RECHECK_MAX = 2.0


def sse_frame(event: Event) -> bytes:
    """``id:``, ``event:`` and ``data:`` (the webhook envelope, one JSON line)."""
    data = orjson.dumps(envelope(event.type, event.created_at, event.data))
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (event.id.encode(), event.type.encode(), data)


@dataclass(frozen=True)
class StreamStart:
    """Where a connection starts, and the events already committed that it leaves out."""

    position: events_repo.Position
    already: frozenset[str]


class EventStream:
    """Serves stream connections; ``heartbeat`` and ``poll`` are seconds (tests shorten them)."""

    def __init__(
        self, db: Database, *, heartbeat: float = 15.0, poll: float = 1.0, batch: int = 500
    ) -> None:
        self.db = db
        self.heartbeat = heartbeat
        self.poll = poll
        self.batch = batch
        self._wakers: set[asyncio.Event] = set()
        db.add_listener(EVENTS_CHANNEL, self._wake_all)

    def _wake_all(self) -> None:
        for waker in self._wakers:
            waker.set()

    async def start(self, team_id: str, last_event_id: str | None) -> StreamStart:
        """Where a connection starts: after ``Last-Event-ID`` when known, else at "now"."""
        async with self.db.read() as tx:
            if last_event_id:
                found = await events_repo.position_of(tx, team_id, last_event_id)
                if found is not None:
                    return StreamStart(found, frozenset())
            return StreamStart(*await events_repo.tail_position(tx, team_id))

    async def frames(
        self, team_id: str, start: StreamStart, types: Sequence[str] | None
    ) -> AsyncIterator[bytes]:
        """Every event after ``start`` as it is recorded, with heartbeats while quiet."""
        waker = asyncio.Event()
        self._wakers.add(waker)
        position, last_sent, recheck = start.position, time.monotonic(), _RECHECK_FIRST
        try:
            yield b"retry: 2000\n\n"
            while True:
                woken = waker.is_set()
                waker.clear()  # before reading: a wake during the read is kept for the next turn
                found = await self._read(team_id, position, types)
                for event, after in found:
                    if event.id not in start.already:
                        yield sse_frame(event)
                        last_sent = time.monotonic()
                    position = after
                if len(found) == self.batch:
                    continue
                # Woken for nothing: the event may be held back behind an older transaction
                # still open (PostgreSQL), so look again soon, backing off up to ``poll``.
                recheck = _RECHECK_FIRST if found or not woken else min(recheck * 2, _RECHECK_MAX)
                if time.monotonic() - last_sent >= self.heartbeat:
                    yield HEARTBEAT
                    last_sent = time.monotonic()
                quiet = self.heartbeat - (time.monotonic() - last_sent)
                wait = min(self.poll, quiet, recheck if woken and not found else self.poll)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waker.wait(), max(wait, 0.01))
        finally:
            self._wakers.discard(waker)

    async def _read(
        self, team_id: str, position: events_repo.Position, types: Sequence[str] | None
    ) -> list[tuple[Event, events_repo.Position]]:
        async with self.db.read() as tx:
            return await events_repo.events_after(tx, team_id, position, types, self.batch)
