"""Accepted emails, their events, jobs and webhook deliveries in one statement, the wake-ups
they owe told after it; ``Database.autocommit`` for work that is that one statement.
Each write also with many rows (``SIZES``): every one stored and fanned out, or none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg
import pytest
from sqlalchemy import func, select

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.ids import new_id
from posthaste.core.jobs import JobKind
from posthaste.core.models import Event, NewJob
from posthaste.errors import ServiceUnavailable
from posthaste.storage import bulk
from posthaste.storage import events as events_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import (
    EVENTS_CHANNEL,
    JOBS_CHANNEL,
    WEBHOOKS_CHANNEL,
    Database,
    Tx,
)
from posthaste.storage.tables import api_keys, events, jobs, webhook_deliveries, webhooks
from tests.conftest import Tenant
from tests.integration.rows import api_key_row, webhook_row

CHANNELS = (JOBS_CHANNEL, EVENTS_CHANNEL, WEBHOOKS_CHANNEL)
Unit = Callable[[Database], AbstractAsyncContextManager[Tx]]
UNITS: dict[str, Unit] = {
    "transaction": lambda db: db.transaction(),
    "autocommit": lambda db: db.autocommit(),
}
SIZES = {"one": 1, "many": 150}  # events in the write


def _written(team: str, size: str, kind: str) -> list[Event]:
    """``SIZES[size]`` events of ``kind``."""
    return [Event(new_id(), team, kind, None, 1, {"n": n}) for n in range(SIZES[size])]


def _enqueued(tx: Tx, team: str, size: str) -> bulk.TableRows:
    """``SIZES[size]`` jobs, to store with the events."""
    new_jobs = [NewJob(JobKind.DELIVER_EMAIL, new_id(), team, 5) for _ in range(SIZES[size])]
    return jobs_repo.enqueued(tx, new_jobs, 1)


def _listen(db: Database) -> dict[str, asyncio.Event]:
    heard = {channel: asyncio.Event() for channel in CHANNELS}
    for channel, flag in heard.items():
        db.add_listener(channel, flag.set)
    return heard


async def _count(services: Services, table: Any, team_id: str) -> int:
    async with services.db.read() as tx:
        query = select(func.count()).select_from(table).where(table.c.team_id == team_id)
        return int((await tx.conn.execute(query)).scalar_one())


@pytest.fixture
async def other(services: Services, settings: Settings) -> AsyncIterator[Services]:
    """Another process on the same database, listening."""
    other = build_services(settings)
    await other.db.start_listening()
    yield other
    await other.close()


@pytest.fixture
async def deaf(settings: Settings) -> AsyncIterator[Services]:
    """This process's services on the same database, hearing no other connection: on SQLite
    a listening process is woken every time its pool (or anyone) has committed, a moment after
    the commit, which would blur whether the write under test woke anyone."""
    deaf = build_services(settings)
    yield deaf
    await deaf.close()


@pytest.mark.parametrize("backend", ["postgres"])  # SQLite serves one process: no NOTIFY
@pytest.mark.parametrize("unit", sorted(UNITS))
@pytest.mark.parametrize("size", sorted(SIZES))
async def test_the_write_wakes_every_process_with_what_it_owes(
    services: Services, other: Services, tenant: Tenant, unit: str, size: str
) -> None:
    team = tenant.team.id
    hooks = [webhook_row(team, ["email.queued"]), webhook_row(team, ["email.sent", "email.queued"])]
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, webhooks, [*hooks, webhook_row(team, ["email.sent"])])
    heard_here, heard_there = _listen(services.db), _listen(other.db)
    async with UNITS[unit](services.db) as tx:
        written = _written(team, size, "email.queued")
        await events_repo.insert_events(tx, written, [_enqueued(tx, team, size)])
    assert all(flag.is_set() for flag in heard_here.values())  # this process: at once
    for flag in heard_there.values():  # another process: through NOTIFY
        await asyncio.wait_for(flag.wait(), 5)
    count = SIZES[size]
    assert [await _count(services, t, team) for t in (events, jobs, webhook_deliveries)] == [
        count,
        count,
        2 * count,  # one per subscribed endpoint
    ]
    async with services.db.read() as tx:
        query = select(webhook_deliveries.c.webhook_id, webhook_deliveries.c.event_id)
        pairs = set((await tx.conn.execute(query)).all())
    assert pairs == {(hook["id"], event.id) for hook in hooks for event in written}


@pytest.mark.parametrize("unit", sorted(UNITS))
@pytest.mark.parametrize("size", sorted(SIZES))
async def test_no_subscribed_endpoint_no_dispatcher_wake_up(
    services: Services, deaf: Services, tenant: Tenant, unit: str, size: str
) -> None:
    team = tenant.team.id
    disabled = {**webhook_row(team, ["email.sent"]), "enabled": False}
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, webhooks, [webhook_row(team, ["email.bounced"]), disabled])
    heard = _listen(deaf.db)
    async with UNITS[unit](deaf.db) as tx:
        await events_repo.insert_events(tx, _written(team, size, "email.sent"))
    assert heard[EVENTS_CHANNEL].is_set()
    assert not heard[WEBHOOKS_CHANNEL].is_set() and not heard[JOBS_CHANNEL].is_set()
    assert await _count(services, webhook_deliveries, team) == 0
    assert await _count(services, events, team) == SIZES[size]


@pytest.mark.parametrize("unit", sorted(UNITS))
@pytest.mark.parametrize("size", sorted(SIZES))
async def test_a_failing_write_stores_nothing_and_wakes_no_one(
    services: Services, deaf: Services, tenant: Tenant, unit: str, size: str
) -> None:
    team = tenant.team.id
    orphan_key = api_key_row(new_id())  # no such team
    heard = _listen(deaf.db)
    with pytest.raises(Exception, match=r"(?i)foreign key"):
        async with UNITS[unit](deaf.db) as tx:
            also = [_enqueued(tx, team, size), (api_keys, [orphan_key])]
            await events_repo.insert_events(tx, _written(team, size, "email.sent"), also)
    assert not any(flag.is_set() for flag in heard.values())
    assert [await _count(services, t, team) for t in (events, jobs)] == [0, 0]


async def _backend(tx: Tx) -> int:
    assert tx.driver is not None
    return int(await tx.driver.fetchval("SELECT pg_backend_pid()"))


@pytest.mark.parametrize("backend", ["postgres"])
async def test_autocommit_keeps_its_connection_from_unit_to_unit(services: Services) -> None:
    db = services.db
    async with db.autocommit() as tx:
        kept = await _backend(tx)
    async with db.autocommit() as tx:
        assert await _backend(tx) == kept
    with pytest.raises(asyncpg.DivisionByZeroError):  # a failing statement: still usable
        async with db.autocommit() as tx:
            await tx.conn.execute(select(func.count()).select_from(jobs))  # SQLAlchemy's too
            await tx.driver.fetchval("SELECT 1 / 0")  # type: ignore[union-attr]
    async with db.autocommit() as tx:
        assert await _backend(tx) == kept
        assert not tx.conn.in_transaction()
    async with db.autocommit() as tx:  # a second unit meanwhile takes one from the pool
        async with db.autocommit() as other:
            assert await _backend(other) != kept
        assert await _backend(tx) == kept


async def _terminate(db: Database, backend: int) -> None:
    async with db.driver() as conn:
        await conn.execute("SELECT pg_terminate_backend($1)", backend)
    await asyncio.sleep(0.2)  # the kept connection reads its end


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_connection_lost_between_units_is_replaced(
    services: Services, tenant: Tenant
) -> None:
    db = services.db
    async with db.autocommit() as tx:
        lost = await _backend(tx)
    await _terminate(db, lost)
    async with db.autocommit() as tx:
        assert await _backend(tx) != lost
        event = Event(new_id(), tenant.team.id, "email.sent", None, 1, {})
        await events_repo.insert_events(tx, [event])
    assert await _count(services, events, tenant.team.id) == 1


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_connection_lost_during_a_unit_is_a_503_and_replaced(
    services: Services, tenant: Tenant
) -> None:
    db = services.db
    with pytest.raises(ServiceUnavailable):
        async with db.autocommit() as tx:
            lost = await _backend(tx)
            await _terminate(db, lost)
            await suppressions_repo.find_listed(tx, tenant.team.id, ["a@example.com"])
    async with db.autocommit() as tx:
        assert await _backend(tx) != lost


async def _generic_backend(tx: Tx) -> int:
    assert tx.generic is not None
    return int(await tx.generic.fetchval("SELECT pg_backend_pid()"))


@pytest.mark.parametrize("backend", ["postgres"])
async def test_the_storing_connection_lost_is_replaced_with_its_partner(
    services: Services, tenant: Tenant
) -> None:
    """The kept connection on generic plans (the one the storing statement runs on): lost
    between units, both kept connections are replaced; lost under the storing statement, the
    unit is a 503, nothing is stored, and the next unit has new ones."""
    db = services.db
    async with db.autocommit() as tx:
        lost, partner = await _generic_backend(tx), await _backend(tx)
    await _terminate(db, lost)
    async with db.autocommit() as tx:
        assert await _generic_backend(tx) != lost and await _backend(tx) != partner
        event = Event(new_id(), tenant.team.id, "email.sent", None, 1, {})
        await events_repo.insert_events(tx, [event])
    assert await _count(services, events, tenant.team.id) == 1
    with pytest.raises(ServiceUnavailable):
        async with db.autocommit() as tx:
            lost = await _generic_backend(tx)
            await _terminate(db, lost)
            event = Event(new_id(), tenant.team.id, "email.sent", None, 1, {})
            await events_repo.insert_events(tx, [event])
    async with db.autocommit() as tx:
        assert await _generic_backend(tx) != lost
    assert await _count(services, events, tenant.team.id) == 1


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_dead_connection_handed_out_for_the_storing_statement_is_a_503(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool may hand out a connection whose server has ended it (a restart): setting up the
    storing statement's connection on it is a 503 (seen as a 500 under a restart before), and
    the next unit gets working ones."""
    db, autocommit_tx, made, ended = services.db, Database._autocommit_tx, [], []

    async def ended_second(self: Database, conn: Any) -> Tx:
        tx = await autocommit_tx(self, conn)
        made.append(tx)
        if len(made) == 2:  # the second kept connection: the one on generic plans
            ended.append(await _backend(tx))
            await _terminate(db, ended[0])
        return tx

    monkeypatch.setattr(Database, "_autocommit_tx", ended_second)
    with pytest.raises(ServiceUnavailable):
        async with db.autocommit():
            pass
    monkeypatch.undo()
    async with db.autocommit() as tx:
        assert await _generic_backend(tx) != ended[0]
