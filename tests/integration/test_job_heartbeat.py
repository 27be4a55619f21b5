"""Leases kept alive while jobs run (the worker's heartbeat), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, select

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.ids import now_ms
from posthaste.core.models import Job
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.tables import jobs
from posthaste.workers.runner import Worker
from tests.integration.test_smtp_delivery import mailer, smarthost
from tests.smtp_sink import Sink, running_sink

# Seconds; the heartbeat beats every third of it. A second, not less: on a loaded machine a
# beat late by more than the lease would let the other worker claim the job (seen at 0.5 s).
LEASE = 1.0
SLOW = 4 * LEASE
# Only the heartbeat sets available_at alone on claimed ids (claim and retries set more).
EXTEND = re.compile(r"UPDATE jobs SET available_at=\S+ WHERE jobs\.id IN \(SELECT")


async def _enqueue(services: Services, kind: str, count: int) -> None:
    now = now_ms()
    rows = [jobs_repo.job_row(kind, f"{kind}-{i}", None, now, now) for i in range(count)]
    async with services.db.transaction() as tx:
        await jobs_repo.enqueue_many(tx, rows)


async def _claim_as_other(services: Services, kind: str) -> list[Job]:
    async with services.db.transaction() as tx:
        return await jobs_repo.claim(tx, [kind], "other", now_ms(), 60_000, 10)


async def _next_due(services: Services, kind: str) -> int | None:
    async with services.db.read() as tx:
        return await jobs_repo.next_due_at(tx, [kind])


async def _available_at(services: Services, job_id: int) -> int | None:
    async with services.db.read() as tx:
        query = select(jobs.c.available_at).where(jobs.c.id == job_id)
        found = (await tx.conn.execute(query)).scalar()
    return None if found is None else int(found)


@contextmanager
def lease_extensions(services: Services) -> Iterator[list[str]]:
    """The lease extensions (``extend_many`` statements) the database runs meanwhile."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if EXTEND.match(statement):
            seen.append(statement)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def test_a_job_running_past_its_lease_is_never_claimed_twice(services: Services) -> None:
    await _enqueue(services, "slow", 1)
    runs: list[Job] = []
    stolen: list[Job] = []

    async def handler(job: Job) -> None:
        runs.append(job)
        deadline = now_ms() + SLOW * 1000
        while now_ms() < deadline:  # meanwhile nobody else may claim the job
            stolen.extend(await _claim_as_other(services, "slow"))
            await asyncio.sleep(0.05)
        async with services.db.transaction() as tx:
            assert await jobs_repo.finish(tx, job)

    first = Worker(services.db, {"slow": handler}, lease_seconds=LEASE)
    second = Worker(services.db, {"slow": handler}, lease_seconds=LEASE)
    with lease_extensions(services) as extensions:
        tasks = [asyncio.create_task(w.run()) for w in (first, second)]
        try:
            for _ in range(1200):  # 60 s at most
                if runs and (first.processed + second.processed) == 1:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(2 * LEASE)  # a second run would start by now, if any
        finally:
            for worker in (first, second):
                worker.stop()
            await asyncio.gather(*tasks)
    assert stolen == []
    assert [job.attempts for job in runs] == [1]
    assert first.processed + second.processed == 1
    assert len(extensions) >= 3  # ~every LEASE/3 for 4 leases
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 0


async def test_a_batch_keeps_only_the_jobs_it_still_holds(services: Services) -> None:
    await _enqueue(services, "batched", 3)
    later = now_ms() + 600_000
    released: list[Job] = []
    stolen: list[Job] = []

    async def batch(group: list[Job]) -> None:
        # Like delivery's first step: one job finishes, one is put off (a scheduled email),
        # and the rest is worked on past the lease.
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, group[:1])
            await jobs_repo.retry_many(tx, [(group[1], later)])
        released.append(group[1])
        await asyncio.sleep(SLOW)
        stolen.extend(await _claim_as_other(services, "batched"))
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, group[2:])

    worker = Worker(services.db, {}, lease_seconds=LEASE, batch_handlers={"batched": batch})
    with lease_extensions(services) as extensions:
        assert await worker.run_until_idle() == 3
    assert stolen == []
    assert len(extensions) >= 3
    # The heartbeat never touched the job released for later.
    assert await _available_at(services, released[0].id) == later
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 1


async def test_a_batch_done_within_a_third_of_the_lease_costs_no_extension(
    services: Services,
) -> None:
    await _enqueue(services, "batched", 5)

    async def batch(group: list[Job]) -> None:
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, group)

    worker = Worker(services.db, {}, lease_seconds=30, batch_handlers={"batched": batch})
    with lease_extensions(services) as extensions:
        assert await worker.run_until_idle() == 5
    assert extensions == []


async def test_a_dead_workers_job_falls_due_after_the_lease(services: Services) -> None:
    await _enqueue(services, "stuck", 1)
    started = asyncio.Event()
    # Longer than LEASE: a beat (every third of the lease) late by two thirds of it lets the
    # lease lapse, and on a loaded box a SQLite write waited that long for 1 s leases.
    lease = 3 * LEASE

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()  # never returns: the worker dies in here

    worker = Worker(services.db, {"stuck": handler}, lease_seconds=lease)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(1.5 * lease)
    assert await _claim_as_other(services, "stuck") == []  # kept alive past its first lease
    task.cancel()  # the worker dies: its heartbeat stops with it
    died_at = now_ms()
    await asyncio.gather(task, return_exceptions=True)
    due = await _next_due(services, "stuck")
    assert due is not None and due <= died_at + lease * 1000
    await asyncio.sleep(max(0.0, (due - now_ms()) / 1000) + lease)
    assert await _next_due(services, "stuck") == due  # no beat after the death
    [again] = await _claim_as_other(services, "stuck")
    assert again.attempts == 2


async def test_an_smtp_session_longer_than_the_lease_sends_once(settings: Settings) -> None:
    hold = asyncio.Event()
    sink = Sink(hold=hold)
    async with running_sink(sink), mailer(settings, smarthost(sink)) as m:
        email_id = await m.send()
        workers = [m.services.make_worker(lease_seconds=LEASE) for _ in range(2)]
        tasks = [asyncio.create_task(w.run()) for w in workers]
        try:
            for _ in range(1200):  # 60 s at most
                if sink.data_started:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(SLOW)  # DATA held for four leases; the other worker waits
            assert sink.data_started == 1
            hold.set()
            for _ in range(1200):  # 60 s at most
                if (await m.get(f"/emails/{email_id}"))["status"] == "sent":
                    break
                await asyncio.sleep(0.05)
        finally:
            for worker in workers:
                worker.stop()
            await asyncio.gather(*tasks)
        assert len(sink.messages) == 1 and sink.data_started == 1
        assert await m.event_types(email_id) == ["email.queued", "email.sending", "email.sent"]
        attempts = await m.get(f"/emails/{email_id}/attempts")
        assert len(attempts["data"]) == 1
