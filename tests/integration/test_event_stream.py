"""The live event stream over real HTTP (uvicorn on loopback): live events, type filters,
heartbeats, resuming after a disconnect without a gap, and wake-ups across processes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx
import orjson
import pytest
import uvicorn

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Event
from posthaste.storage import events as events_repo
from tests.apps import make_app
from tests.conftest import PG_ADMIN_DSN, Tenant
from tests.webhook_receiver import eventually

Frame = dict[str, str]


@pytest.fixture
async def base_url(services: Services) -> AsyncIterator[str]:
    """The API served by a real uvicorn on a free loopback port (SSE needs a real server)."""
    services.event_stream.heartbeat = 0.3
    services.event_stream.poll = 0.2
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        make_app(services), lifespan="off", log_config=None, timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually(lambda: server.started, what="uvicorn to start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    await asyncio.wait_for(task, 10)
    sock.close()


class StreamReader:
    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def frame(self) -> Frame:
        """The next event or comment block (fields by name; comments under ``":"``)."""
        fields: Frame = {}
        async with asyncio.timeout(15):
            async for line in self._lines:
                if not line:
                    if fields:
                        return fields
                    continue
                name, _, value = line.partition(":")
                fields[name or ":"] = value.removeprefix(" ")
        raise AssertionError("the stream ended")

    async def event(self) -> Frame:
        """The next event, skipping heartbeats and the ``retry`` advice."""
        while True:
            frame = await self.frame()
            if "id" in frame:
                return frame


@asynccontextmanager
async def stream(
    base_url: str, tenant: Tenant, query: str = "", last_event_id: str | None = None
) -> AsyncIterator[StreamReader]:
    headers = tenant.headers()
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=20) as http,
        http.stream("GET", "/events/stream" + query, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = StreamReader(response)
        assert await reader.frame() == {"retry": "2000"}  # the stream is open from here
        yield reader


async def record(services: Services, tenant: Tenant, *types: str) -> list[Event]:
    """Events recorded in one transaction, as the send path and the workers record them."""
    items = [
        Event(new_id(), tenant.team.id, kind, None, now_ms(), {"email_id": new_id()})
        for kind in types
    ]
    async with services.db.transaction() as tx:
        await events_repo.insert_events(tx, items)
    return items


async def test_events_arrive_live_with_their_envelope_and_type_filter(
    services: Services, tenant: Tenant, base_url: str
) -> None:
    async with stream(base_url, tenant, "?types=email.sent,email.delivered") as reader:
        _, sent, delivered = await record(
            services, tenant, "email.queued", "email.sent", "email.delivered"
        )
        first, second = await reader.event(), await reader.event()
    assert [first["id"], second["id"]] == [sent.id, delivered.id]
    assert first["event"] == "email.sent"
    envelope = orjson.loads(first["data"])
    assert envelope["type"] == "email.sent" and envelope["data"] == sent.data
    assert envelope["created_at"].endswith("Z")


async def test_heartbeats_keep_a_quiet_stream_open(
    services: Services, tenant: Tenant, base_url: str
) -> None:
    async with stream(base_url, tenant) as reader:
        assert await reader.frame() == {":": "keep-alive"}


async def test_another_teams_events_never_appear(
    services: Services, tenant: Tenant, base_url: str
) -> None:
    from tests.conftest import make_tenant

    other = await make_tenant(services)
    async with stream(base_url, tenant) as reader:
        await record(services, other, "email.sent")
        [mine] = await record(services, tenant, "email.sent")
        assert (await reader.event())["id"] == mine.id


async def test_resuming_with_last_event_id_loses_nothing(
    services: Services, tenant: Tenant, base_url: str
) -> None:
    async with stream(base_url, tenant) as reader:
        [first] = await record(services, tenant, "email.queued")
        assert (await reader.event())["id"] == first.id
    missed = []
    for kind in ("email.sending", "email.sent", "email.delivered"):  # while disconnected
        missed += await record(services, tenant, kind)
    async with stream(base_url, tenant, last_event_id=first.id) as reader:
        caught_up = [(await reader.event())["id"] for _ in missed]
        [later] = await record(services, tenant, "email.opened")
        assert (await reader.event())["id"] == later.id
    assert caught_up == [e.id for e in missed]


async def test_an_unknown_last_event_id_starts_at_now(
    services: Services, tenant: Tenant, base_url: str
) -> None:
    await record(services, tenant, "email.queued")
    async with stream(base_url, tenant, last_event_id=new_id()) as reader:
        [fresh] = await record(services, tenant, "email.sent")
        assert (await reader.event())["id"] == fresh.id


@pytest.mark.parametrize("backend", ["postgres"])
async def test_now_leaves_out_what_committed_above_an_open_transaction(
    services: Services, tenant: Tenant, base_url: str
) -> None:
    """An event committed before the reader connects, while an older transaction of the
    cluster is still open (another database's, as when other suites share the server), sorts
    above "now"; the reader does not replay it, and gets what is recorded after it connects."""
    elsewhere = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        held = elsewhere.transaction()
        await held.start()
        await elsewhere.fetchval("SELECT txid_current()")  # an xid, held open
        [before] = await record(services, tenant, "email.queued")
        async with stream(base_url, tenant) as reader:  # "now" is read while it is open
            await held.commit()
            [fresh] = await record(services, tenant, "email.sent")
            assert (await reader.event())["id"] == fresh.id
        assert before.id != fresh.id
    finally:
        await elsewhere.close()


async def test_unknown_types_are_refused(services: Services, tenant: Tenant, base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        response = await http.get("/events/stream?types=email.nope", headers=tenant.headers())
    assert response.status_code == 422 and "email.nope" in response.json()["message"]


async def test_an_event_recorded_by_another_process_reaches_the_stream(
    services: Services, settings: Settings, tenant: Tenant, base_url: str, backend: str
) -> None:
    # On PostgreSQL only NOTIFY can wake the stream in time (its poll is pushed out of reach);
    # a second SQLite process on the same file is reached by the poll.
    services.event_stream.poll = 60 if backend == "postgres" else 0.2
    worker = build_services(settings)  # another process: its own pool and LISTEN connection
    try:
        async with stream(base_url, tenant) as reader:
            [event] = await record(worker, tenant, "email.delivered")
            assert (await reader.event())["id"] == event.id
    finally:
        await worker.close()


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_late_commit_of_an_earlier_event_is_not_skipped(
    services: Services, tenant: Tenant
) -> None:
    """Two transactions commit out of id order; the reader must still see both, in order."""
    async with services.db.read() as tx:
        start, _ = await events_repo.tail_position(tx, tenant.team.id)
    early = Event(new_id(), tenant.team.id, "email.sent", None, now_ms(), {})
    late = Event(new_id(), tenant.team.id, "email.delivered", None, now_ms(), {})

    async def read_all(after: events_repo.Position) -> list[tuple[Event, events_repo.Position]]:
        async with services.db.read() as tx:
            return await events_repo.events_after(tx, tenant.team.id, after, None, 100)

    async with services.db.transaction() as slow_tx:
        await events_repo.insert_events(slow_tx, [early])  # still uncommitted
        async with services.db.transaction() as quick_tx:
            await events_repo.insert_events(quick_tx, [late])
        seen = await read_all(start)
        assert seen == []  # the later commit waits behind the open transaction
    both = [early.id, late.id]

    async def settled() -> bool:
        # Any writing transaction of the cluster still open (other tests too) holds them back.
        nonlocal seen
        seen = await read_all(start)
        return [event.id for event, _ in seen] == both

    await eventually(settled, what="both events, in order")
    assert await read_all(seen[-1][1]) == []
