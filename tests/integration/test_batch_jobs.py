"""Batch handlers: a worker hands every claimed job of a kind to one call."""

from __future__ import annotations

from posthaste.bootstrap import Services
from posthaste.core.ids import now_ms
from posthaste.core.jobs import Handoff
from posthaste.core.models import Job
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Tx
from posthaste.workers.runner import BatchRun, Worker


async def _enqueue(services: Services, kind: str, count: int) -> None:
    now = now_ms()
    rows = [jobs_repo.job_row(kind, f"{kind}-{i}", None, now, now) for i in range(count)]
    async with services.db.transaction() as tx:
        await jobs_repo.enqueue_many(tx, rows)


async def test_batch_and_single_handlers_share_a_claim(services: Services) -> None:
    await _enqueue(services, "batched", 10)
    await _enqueue(services, "single", 3)
    batches: list[list[str]] = []
    singles: list[str] = []

    async def batch(jobs: list[Job]) -> None:
        batches.append([job.ref for job in jobs])
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, jobs)

    async def single(job: Job) -> None:
        singles.append(job.ref)
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)

    worker = Worker(
        services.db,
        {"single": single},
        lease_seconds=60,
        batch_size=8,
        batch_handlers={"batched": batch},
    )
    assert await worker.run_until_idle() == 13
    assert sorted(ref for group in batches for ref in group) == sorted(
        f"batched-{i}" for i in range(10)
    )
    assert all(len(group) <= 8 for group in batches) and len(batches) >= 2
    assert sorted(singles) == ["single-0", "single-1", "single-2"]
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 0


async def test_a_failing_batch_leaves_its_jobs_for_after_the_lease(services: Services) -> None:
    await _enqueue(services, "batched", 3)

    async def broken(jobs: list[Job]) -> None:
        raise RuntimeError("boom")

    worker = Worker(services.db, {}, lease_seconds=60, batch_handlers={"batched": broken})
    assert await worker.run_until_idle() == 3
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 3  # still there, leased
        assert await jobs_repo.next_due_at(tx, ["batched"]) > now_ms() + 50_000


async def test_retry_many_is_fenced_by_attempts(services: Services) -> None:
    await _enqueue(services, "batched", 2)
    async with services.db.transaction() as tx:
        first, second = await jobs_repo.claim(tx, ["batched"], "w", now_ms(), 60_000, 10)
    stale = Job(second.id, second.kind, second.ref, second.team_id, second.attempts - 1)
    later = now_ms() + 5_000
    async with services.db.transaction() as tx:
        await jobs_repo.retry_many(tx, [(first, later), (stale, later)])
        await jobs_repo.finish_many(tx, [stale])
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 2  # the stale holder changed nothing
        assert await jobs_repo.next_due_at(tx, ["batched"]) == later


async def test_a_batch_started_in_its_claim_commits_with_it(services: Services) -> None:
    """What a starter writes commits with the claim; the rest runs after the commit."""
    await _enqueue(services, "batched", 3)
    ran: list[list[str]] = []

    async def start(tx: Tx, jobs: list[Job]) -> BatchRun:
        await jobs_repo.note(tx, jobs[0], "started")  # a write of the claim's transaction

        async def run() -> None:
            ran.append([job.ref for job in jobs])
            async with services.db.transaction() as tx:
                await jobs_repo.finish_many(tx, jobs[1:])

        return run

    async def unused(jobs: list[Job]) -> None:
        raise AssertionError("a started batch does not go to its handler")

    worker = Worker(
        services.db,
        {},
        lease_seconds=60,
        batch_handlers={"batched": unused},
        batch_starters={"batched": start},
    )
    assert await worker.run_until_idle() == 3
    assert ran == [["batched-0", "batched-1", "batched-2"]]
    async with services.db.transaction() as tx:
        [left] = await jobs_repo.claim(tx, ["batched"], "w", now_ms() + 120_000, 60_000, 10)
    assert (left.ref, left.attempts) == ("started", 2)


async def test_a_failing_starter_leaves_its_batch_to_the_handler(services: Services) -> None:
    await _enqueue(services, "batched", 3)
    handled: list[tuple[str, int]] = []

    async def broken(tx: Tx, jobs: list[Job]) -> BatchRun:
        await jobs_repo.note(tx, jobs[0], "half-started")  # rolled back with the claim
        raise RuntimeError("boom")

    async def batch(jobs: list[Job]) -> None:
        handled.extend((job.ref, job.attempts) for job in jobs)
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, jobs)

    worker = Worker(
        services.db,
        {},
        lease_seconds=60,
        batch_handlers={"batched": batch},
        batch_starters={"batched": broken},
    )
    assert await worker.run_until_idle() == 3
    # Claimed once (the failed claim rolled back), by the handler, nothing half-started.
    assert sorted(handled) == [(f"batched-{i}", 1) for i in range(3)]
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 0


async def test_handed_off_jobs_run_next_ahead_of_jobs_due_before_them(services: Services) -> None:
    """A batch hands off the jobs it made due (an automation batch's deliveries): the worker
    claims them at once and runs them before the jobs that fell due earlier, which a claim in
    due order would take first; a handed-off job already gone is skipped."""
    await _enqueue(services, "maker", 3)
    ran: list[str] = []

    async def make(jobs: list[Job]) -> Handoff:
        ran.extend(job.ref for job in jobs)
        now = now_ms()
        refs = [f"made-by-{job.ref}" for job in jobs]
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, jobs)
            await jobs_repo.enqueue_many(
                tx, [jobs_repo.job_row("made", r, None, now, now) for r in refs]
            )
        return Handoff("made", [*refs, "never-made"])

    async def made(jobs: list[Job]) -> None:
        ran.extend(job.ref for job in jobs)
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, jobs)

    worker = Worker(
        services.db,
        {},
        lease_seconds=60,
        batch_size=1,
        batch_handlers={"maker": make, "made": made},
    )
    assert await worker.run_until_idle() == 6
    assert ran == [
        "maker-0", "made-by-maker-0", "maker-1", "made-by-maker-1", "maker-2", "made-by-maker-2"
    ]  # fmt: skip
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 0
