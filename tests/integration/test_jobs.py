"""The job queue on SQLite and PostgreSQL: claims, leases, wake-ups."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from posthaste.bootstrap import Services
from posthaste.core.ids import now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Database
from posthaste.workers.runner import Worker
from tests.webhook_receiver import eventually


async def _enqueue(
    services: Services, count: int, kind: str = "test_job", due: int | None = None
) -> None:
    now = now_ms()
    rows = [jobs_repo.job_row(kind, f"ref-{i}", None, due or now, now) for i in range(count)]
    async with services.db.transaction() as tx:
        await jobs_repo.enqueue_many(tx, rows)


async def test_concurrent_claims_never_share_a_job(services: Services) -> None:
    await _enqueue(services, 300)

    async def claimer(name: str) -> list[int]:
        mine: list[int] = []
        while True:
            async with services.db.transaction() as tx:
                jobs = await jobs_repo.claim(tx, ["test_job"], name, now_ms(), 60_000, 7)
            if not jobs:
                return mine
            mine.extend(job.id for job in jobs)

    results = await asyncio.gather(*(claimer(f"w{i}") for i in range(8)))
    claimed = Counter(job_id for ids in results for job_id in ids)
    assert len(claimed) == 300
    assert max(claimed.values()) == 1
    assert sum(1 for ids in results if ids) > 1  # the work really was shared


async def test_a_leased_job_is_claimed_again_only_after_its_lease(services: Services) -> None:
    await _enqueue(services, 1)
    start = now_ms()
    async with services.db.transaction() as tx:
        [first] = await jobs_repo.claim(tx, ["test_job"], "dead-worker", start, 500, 10)
    async with services.db.transaction() as tx:
        assert await jobs_repo.claim(tx, ["test_job"], "other", start + 100, 500, 10) == []
    async with services.db.transaction() as tx:
        [again] = await jobs_repo.claim(tx, ["test_job"], "other", start + 600, 500, 10)
    assert again.id == first.id and again.attempts == 2
    # The dead worker's late "finish" must not delete the new holder's claim.
    async with services.db.transaction() as tx:
        assert await jobs_repo.finish(tx, first) is False
        assert await jobs_repo.finish(tx, again) is True
        assert await jobs_repo.depth(tx) == 0


async def test_a_hold_is_counted_apart_and_the_claims_only_grow(services: Services) -> None:
    """Mail put back unsent (its destination busy) keeps its fencing token: ``attempts``
    counts every claim, ``holds`` the ones that ended in a hold, ``tries`` the rest."""
    await _enqueue(services, 1)
    start = now_ms()
    async with services.db.transaction() as tx:
        [first] = await jobs_repo.claim(tx, ["test_job"], "w", start, 60_000, 10)
        await jobs_repo.postpone_many(tx, [(first, start)])
    async with services.db.transaction() as tx:
        [again] = await jobs_repo.claim(tx, ["test_job"], "w", start + 1, 60_000, 10)
    assert (again.attempts, again.holds, again.tries) == (2, 1, 1)
    # The first claim's late hold must not move the new claim's job.
    async with services.db.transaction() as tx:
        await jobs_repo.postpone_many(tx, [(first, start)])
    async with services.db.transaction() as tx:
        assert await jobs_repo.claim(tx, ["test_job"], "w", start + 2, 60_000, 10) == []
        await jobs_repo.retry_many(tx, [(again, start)])  # a real try, due again at once
    async with services.db.transaction() as tx:
        [third] = await jobs_repo.claim(tx, ["test_job"], "w", start + 3, 60_000, 10)
    assert (third.attempts, third.holds, third.tries) == (3, 1, 2)


async def test_worker_runs_an_abandoned_job_after_the_lease(services: Services) -> None:
    await _enqueue(services, 1)
    async with services.db.transaction() as tx:
        await jobs_repo.claim(tx, ["test_job"], "crashed", now_ms(), 300, 10)
    done: list[Job] = []
    finished = asyncio.Event()

    async def handler(job: Job) -> None:
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)
        done.append(job)
        finished.set()

    worker = Worker(services.db, {"test_job": handler}, lease_seconds=30)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(finished.wait(), 5)
    finally:
        worker.stop()
        await task
    assert [job.attempts for job in done] == [2]


async def test_an_idle_worker_wakes_on_commit_not_on_a_poll(services: Services) -> None:
    got = asyncio.Event()

    async def handler(job: Job) -> None:
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)
        got.set()

    # idle_check of an hour: only the wake-up from the commit can make this pass in time.
    worker = Worker(services.db, {"test_job": handler}, lease_seconds=30, idle_check=3600)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.2)  # let the worker go idle
        await _enqueue(services, 1)
        await asyncio.wait_for(got.wait(), 5)
    finally:
        worker.stop()
        await task


async def test_worker_sleeps_until_a_scheduled_job_is_due(services: Services) -> None:
    ran_at: list[int] = []

    async def handler(job: Job) -> None:
        ran_at.append(now_ms())
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)

    due = now_ms() + 700
    await _enqueue(services, 1, due=due)
    worker = Worker(services.db, {"test_job": handler}, lease_seconds=30, idle_check=3600)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(300):  # up to 30 s on a loaded machine; normally under 1 s
            if ran_at:
                break
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
        await task
    assert ran_at and ran_at[0] >= due


async def test_a_failing_handler_does_not_stop_the_worker(services: Services) -> None:
    await _enqueue(services, 2)
    seen: list[str] = []

    async def handler(job: Job) -> None:
        seen.append(job.ref)
        if job.ref == "ref-0":
            raise RuntimeError("boom")
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)

    worker = Worker(services.db, {"test_job": handler}, lease_seconds=30)
    assert await worker.run_until_idle() == 2
    assert sorted(seen) == ["ref-0", "ref-1"]
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 1  # the failed one waits for its lease to run out


async def test_make_worker_claims_every_job_kind_with_its_table_handler(
    services: Services,
) -> None:
    worker = services.make_worker()
    assert sorted(worker.kinds) == sorted(JobKind)
    assert worker.batch_handlers == {
        JobKind.DELIVER_EMAIL: services.delivery.deliver_many,
        JobKind.AUTOMATION_STEP: services.automation_steps.run_steps,
    }
    assert worker.batch_starters == {JobKind.DELIVER_EMAIL: services.delivery.start_claimed}
    assert worker.handlers == {
        JobKind.CHECK_DOMAIN: services.domains.recheck,
        JobKind.IMPORT_CONTACTS: services.contact_imports.run,
        JobKind.EXPAND_BROADCAST: services.broadcasts.expand,
        JobKind.PURGE: services.retention.purge,
        JobKind.TLS_REPORT: services.tls_reports.run,
        JobKind.UPLOAD_TLS_REPORT: services.tls_reports.retry_uploads,
        JobKind.REFRESH_MTA_STS: services.mta_sts_refresher.run,
    }


async def test_a_slow_batch_does_not_hold_up_the_next_claims(services: Services) -> None:
    """Batches overlap: while the first job's batch waits, the worker claims and runs others."""
    await _enqueue(services, 4)
    others_done = asyncio.Event()
    ran: list[str] = []

    async def handler(job: Job) -> None:
        if job.ref == "ref-0":
            await asyncio.wait_for(others_done.wait(), 30)  # held until the rest have run
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)
        ran.append(job.ref)
        if len(ran) == 3 and "ref-0" not in ran:
            others_done.set()

    worker = Worker(
        services.db, {"test_job": handler}, lease_seconds=30, batch_size=1, max_batches=4
    )
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(others_done.wait(), 30)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)  # stop() lets the held batch finish first
    assert sorted(ran[:3]) == ["ref-1", "ref-2", "ref-3"] and ran[3] == "ref-0"
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 0


async def test_no_more_batches_than_max_batches_run_at_once(services: Services) -> None:
    await _enqueue(services, 6)
    running, peak, release = 0, 0, asyncio.Event()
    done = asyncio.Event()
    finished: list[str] = []

    async def handler(job: Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if peak == 2:
            release.set()
        await asyncio.wait_for(release.wait(), 30)
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)
        running -= 1
        finished.append(job.ref)
        if len(finished) == 6:
            done.set()

    worker = Worker(
        services.db, {"test_job": handler}, lease_seconds=30, batch_size=1, max_batches=2
    )
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(done.wait(), 30)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert peak == 2


async def test_a_trickle_costs_one_claim_per_wake_up(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that took less than a full batch took everything due: the worker sleeps until
    the next commit wakes it, rather than claiming again at once and when the batch ends."""
    # A handle of the worker's own, not listening: only its own commits wake it.
    db = Database(services.db.url, services.db.dialect)
    claims = 0
    claim_lanes = jobs_repo.claim_lanes

    async def counted(*args: Any) -> jobs_repo.Claimed:
        nonlocal claims
        claims += 1
        return await claim_lanes(*args)

    monkeypatch.setattr(jobs_repo, "claim_lanes", counted)
    ran: asyncio.Queue[str] = asyncio.Queue()

    async def handler(job: Job) -> None:
        async with db.transaction() as tx:
            await jobs_repo.finish(tx, job)
        ran.put_nowait(job.ref)

    worker = Worker(db, {"test_job": handler}, lease_seconds=30, idle_check=3600)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(3000):  # until its first look (up to 30 s on a loaded machine)
            if claims:
                break
            await asyncio.sleep(0.01)
        for i in range(3):
            now = now_ms()
            async with db.transaction() as tx:
                await jobs_repo.enqueue_many(
                    tx, [jobs_repo.job_row("test_job", f"ref-{i}", None, now, now)]
                )
            assert await asyncio.wait_for(ran.get(), 30) == f"ref-{i}"
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
        await db.close()
    assert claims == 4  # the first look, then one claim per commit


async def test_a_claim_reads_when_the_next_job_falls_due(services: Services) -> None:
    now = now_ms()
    await _enqueue(services, 2)
    async with services.db.transaction() as tx:
        await jobs_repo.enqueue(tx, "test_job", "later", None, now + 60_000, now)
        await jobs_repo.enqueue(tx, "other_kind", "sooner", None, now + 1_000, now)
    async with services.db.transaction() as tx:
        first = await jobs_repo.claim_lanes(tx, {"test_job": 10}, "w", now_ms(), 5_000)
    assert sorted(j.ref for j in first.jobs) == ["ref-0", "ref-1"]
    assert first.next_due == now + 60_000  # not the claimed ones' leases, nor another kind
    async with services.db.transaction() as tx:
        second = await jobs_repo.claim_lanes(tx, {"test_job": 10}, "w", now_ms(), 5_000)
    assert second.jobs == [] and second.next_due is not None
    assert second.next_due <= now_ms() + 5_000  # now the first claim's leases come first
    async with services.db.transaction() as tx:
        none = await jobs_repo.claim_lanes(tx, {"no_such_kind": 10}, "w", now_ms(), 5_000)
    assert none == jobs_repo.Claimed([], None)


async def test_jobs_committed_while_a_batch_runs_are_claimed_together(services: Services) -> None:
    """Woken while a batch runs, the worker lets the jobs gather until it ends (or for
    ``gather_seconds``) and claims them in one batch, rather than one small batch per commit."""
    db = Database(services.db.url, services.db.dialect)  # only its own commits wake it
    release, done = asyncio.Event(), asyncio.Event()
    batches: list[list[str]] = []

    async def handler(group: list[Job]) -> None:
        batches.append(sorted(job.ref for job in group))
        if group[0].ref == "first":
            await asyncio.wait_for(release.wait(), 30)
        async with db.transaction() as tx:
            for job in group:
                await jobs_repo.finish(tx, job)
        if sum(map(len, batches)) == 4:
            done.set()

    async def enqueue(ref: str) -> None:
        now = now_ms()
        async with db.transaction() as tx:
            await jobs_repo.enqueue_many(tx, [jobs_repo.job_row("test_job", ref, None, now, now)])

    worker = Worker(
        db,
        {},
        batch_handlers={"test_job": handler},
        lease_seconds=30,
        idle_check=3600,
        gather_seconds=60,
    )
    task = asyncio.create_task(worker.run())
    try:
        await enqueue("first")
        for _ in range(3000):  # until the first batch runs (up to 30 s on a loaded machine)
            if batches:
                break
            await asyncio.sleep(0.01)
        for i in range(3):
            await enqueue(f"ref-{i}")  # each commit wakes the worker
        release.set()
        await asyncio.wait_for(done.wait(), 30)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
        await db.close()
    assert batches == [["first"], ["ref-0", "ref-1", "ref-2"]]


async def test_each_kind_is_claimed_in_a_lane_of_its_own(services: Services) -> None:
    """A flood of one kind due first neither fills another kind's claim nor is it taken past
    its own number; each kind's jobs come in due order."""
    now = now_ms()
    flood = [jobs_repo.job_row("flood", f"f-{i}", None, now - 1_000 + i, now) for i in range(50)]
    mail = [jobs_repo.job_row("mail", f"m-{i}", None, now - 10 + i, now) for i in range(5)]
    async with services.db.transaction() as tx:
        await jobs_repo.enqueue_many(tx, flood + mail)
    async with services.db.transaction() as tx:
        claimed = await jobs_repo.claim_lanes(tx, {"flood": 20, "mail": 3}, "w", now_ms(), 60_000)
    refs = Counter(job.kind for job in claimed.jobs)
    assert refs == {"flood": 20, "mail": 3}
    assert {j.ref for j in claimed.jobs if j.kind == "mail"} == {"m-0", "m-1", "m-2"}
    assert {j.ref for j in claimed.jobs if j.kind == "flood"} == {f"f-{i}" for i in range(20)}
    async with services.db.transaction() as tx:
        rest = await jobs_repo.claim_lanes(tx, {"flood": 100, "mail": 100}, "w", now_ms(), 60_000)
    assert Counter(job.kind for job in rest.jobs) == {"flood": 30, "mail": 2}


async def test_a_first_kind_keeps_one_other_batch_beside_it(services: Services) -> None:
    """While a job of a first kind (a broadcast's expansion) runs, its worker runs one other
    batch at a time beside it, not ``max_batches``: the other kinds' due jobs still go out,
    one batch after another, and once the first kind's job is over they run side by side."""
    await _enqueue(services, 1, kind="expand")
    expanding, expanded = asyncio.Event(), asyncio.Event()
    running: list[asyncio.Event] = []  # the mail batches inside the handler, each its release
    seen: list[int] = []  # how many mail batches were running as each one started

    async def expand(job: Job) -> None:
        expanding.set()
        await asyncio.wait_for(expanded.wait(), 30)
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)

    async def mail(group: list[Job]) -> None:
        release = asyncio.Event()
        running.append(release)
        seen.append(len(running))
        try:
            await asyncio.wait_for(release.wait(), 30)
            async with services.db.transaction() as tx:
                await jobs_repo.finish_many(tx, group)
        finally:
            running.remove(release)

    worker = Worker(
        services.db,
        {"expand": expand},
        batch_handlers={"mail": mail},
        first_kinds={"expand"},
        lease_seconds=30,
        batch_size=1,
        max_batches=4,
    )
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(expanding.wait(), 30)
        await _enqueue(services, 4, kind="mail")
        for done in range(4):  # one at a time: each released once it runs, the next follows
            await eventually(lambda done=done: len(seen) > done, within=30, what="the next batch")
            running[0].set()
        assert seen == [1, 1, 1, 1]
        expanded.set()
        await _enqueue(services, 3, kind="mail")
        await eventually(lambda: len(running) == 3, within=30, what="three batches at once")
    finally:
        expanded.set()
        for release in list(running):
            release.set()
        worker.stop()
        await asyncio.wait_for(task, 30)
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 0


async def test_a_wide_lane_leaves_one_batch_slot_to_the_other_kinds(services: Services) -> None:
    """Steps claimed many at once (a wide lane) hold at most every slot but one: while they
    are all held up, mail committed meanwhile is still claimed and run."""
    await _enqueue(services, 12, kind="step")
    release, mail_ran = asyncio.Event(), asyncio.Event()
    groups: list[int] = []
    running_steps, peak = 0, 0

    async def steps(group: list[Job]) -> None:
        nonlocal running_steps, peak
        running_steps += 1
        peak = max(peak, running_steps)
        groups.append(len(group))
        await asyncio.wait_for(release.wait(), 30)
        async with services.db.transaction() as tx:
            await jobs_repo.finish_many(tx, group)
        running_steps -= 1

    async def mail(job: Job) -> None:
        async with services.db.transaction() as tx:
            await jobs_repo.finish(tx, job)
        mail_ran.set()

    worker = Worker(
        services.db,
        {"mail": mail},
        batch_handlers={"step": steps},
        lane_sizes={"step": 4},
        lease_seconds=30,
        batch_size=1,
        max_batches=3,
    )
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(3000):  # until the step batches hold their two slots
            if len(groups) == 2:
                break
            await asyncio.sleep(0.01)
        await _enqueue(services, 1, kind="mail")
        await asyncio.wait_for(mail_ran.wait(), 30)  # while every step batch is held up
        assert running_steps == 2 and groups == [4, 4]
        release.set()
        for _ in range(3000):
            async with services.db.read() as tx:
                if await jobs_repo.depth(tx) == 0:
                    break
            await asyncio.sleep(0.01)
    finally:
        release.set()
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert peak == 2 and groups == [4, 4, 4]
    async with services.db.read() as tx:
        assert await jobs_repo.depth(tx) == 0
