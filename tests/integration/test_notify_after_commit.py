"""PostgreSQL: where a commit's wake-ups are NOTIFYed. The data channels (jobs, events, webhook
deliveries) just after the commit, on the process's own notifying connection
(``dialects.Notifier``), so a writing transaction never takes the notification queue's lock;
the caches' channels (``IN_TRANSACTION``) inside the transaction, delivered by its commit. A
listener's callback is told which backend sent each notification: that is what is asserted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import pytest

from posthaste.bootstrap import Services
from posthaste.core.ids import now_ms
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import (
    EVENTS_CHANNEL,
    JOBS_CHANNEL,
    KEYS_CHANNEL,
    WEBHOOKS_CHANNEL,
)
from posthaste.storage.dialects import Notifier

ON_POSTGRES = pytest.mark.parametrize("backend", ["postgres"])  # SQLite has no NOTIFY

CHANNELS = (JOBS_CHANNEL, EVENTS_CHANNEL, WEBHOOKS_CHANNEL, KEYS_CHANNEL)


@dataclass
class Heard:
    """Every notification another connection hears: (sending backend's pid, channel)."""

    conn: asyncpg.Connection
    got: list[tuple[int, str]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on(self, _conn: object, pid: int, channel: str, _payload: str) -> None:
        self.got.append((pid, channel))
        self.changed.set()

    async def until(self, channel: str, count: int = 1) -> list[int]:
        """The pids that sent ``channel``, once ``count`` of them are heard (10 s at most)."""

        async def heard() -> None:
            while sum(1 for _, c in self.got if c == channel) < count:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(heard(), 10)
        return [pid for pid, c in self.got if c == channel]


@pytest.fixture
async def heard(pg_url: str) -> AsyncIterator[Heard]:
    conn = await asyncpg.connect(pg_url)
    found = Heard(conn)
    for channel in CHANNELS:
        await conn.add_listener(channel, found.on)
    yield found
    await conn.close()


@ON_POSTGRES
async def test_a_data_commit_notifies_after_it_on_another_connection(
    services: Services, heard: Heard
) -> None:
    """On the process's LISTEN connection: that backend hands the process its own
    notification back in the same answer."""
    await services.db.start_listening()
    listening = services.db._listen_conn
    assert isinstance(listening, asyncpg.Connection)
    now = now_ms()
    async with services.db.transaction() as tx:
        await jobs_repo.enqueue(tx, "test_job", "ref", None, now, now)
        unit_pid = (await tx.fetch_pg("SELECT pg_backend_pid()"))[0][0]
    [sender] = await heard.until(JOBS_CHANNEL)
    assert sender != unit_pid  # not from the transaction: no queue lock held over its commit
    assert sender == listening.get_server_pid()
    async with services.db.read() as tx:  # what it announces is there for whoever it woke
        assert await jobs_repo.depth(tx) == 1


@ON_POSTGRES
async def test_a_cache_channel_is_notified_inside_the_transaction(
    services: Services, heard: Heard
) -> None:
    """A key revoked or a limit changed (``KEYS_CHANNEL``): the NOTIFY goes with the commit
    itself, so no process keeps the old key because the one that committed died first."""
    async with services.db.transaction() as tx:
        unit_pid = (await tx.fetch_pg("SELECT pg_backend_pid()"))[0][0]
        tx.notify(KEYS_CHANNEL)
    assert await heard.until(KEYS_CHANNEL) == [unit_pid]


async def test_wake_ups_announced_together_go_in_one_notify(pg_url: str, heard: Heard) -> None:
    notifier = Notifier(pg_url)
    try:
        for _ in range(100):
            notifier.announce([JOBS_CHANNEL, EVENTS_CHANNEL])
        notifier.announce([WEBHOOKS_CHANNEL])
        await heard.until(WEBHOOKS_CHANNEL)
        notifier.announce([KEYS_CHANNEL])  # after: notifications of one session keep order
        await heard.until(KEYS_CHANNEL)
        assert sorted(c for _, c in heard.got) == sorted(CHANNELS)  # each once
        assert len({pid for pid, _ in heard.got}) == 1  # one connection of its own
    finally:
        await notifier.close()


async def test_what_is_owed_is_told_before_close(pg_url: str, heard: Heard) -> None:
    notifier = Notifier(pg_url)
    notifier.announce([JOBS_CHANNEL])
    await notifier.close()  # at once: the NOTIFY has not been sent yet
    await heard.until(JOBS_CHANNEL)


@ON_POSTGRES
async def test_a_lost_listen_connection_is_not_notified_through(
    services: Services, heard: Heard
) -> None:
    await services.db.start_listening()
    listening = services.db._listen_conn
    assert isinstance(listening, asyncpg.Connection)
    await heard.conn.execute("SELECT pg_terminate_backend($1)", listening.get_server_pid())
    async with services.db.transaction() as tx:
        now = now_ms()
        await jobs_repo.enqueue(tx, "test_job", "ref", None, now, now)
    [sender] = await heard.until(JOBS_CHANNEL)  # on another connection, lost or not yet heard
    assert sender != listening.get_server_pid()


async def test_a_notifying_connection_the_server_ended_is_replaced(
    pg_url: str, heard: Heard
) -> None:
    notifier = Notifier(pg_url)
    try:
        notifier.announce([JOBS_CHANNEL])
        [first] = await heard.until(JOBS_CHANNEL)
        await heard.conn.execute("SELECT pg_terminate_backend($1)", first)
        notifier.announce([JOBS_CHANNEL])
        second = (await heard.until(JOBS_CHANNEL, 2))[1]
        assert second != first
    finally:
        await notifier.close()
