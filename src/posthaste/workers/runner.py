"""The worker runner: claims due jobs in batches and runs them, woken by the database.

No slow poll: a committed job wakes the runner at once (in its own process at once; in others
by LISTEN/NOTIFY on PostgreSQL, by wake files within 50 ms on SQLite). When nothing is due, the
runner sleeps until the earliest job (a scheduled email, a retry, or a lease running out) falls
due, and at most ``idle_check`` seconds as a safety net.

Claimed batches overlap: while one batch builds and signs its messages (CPU), others wait on
their SMTP sessions and database writes, so up to ``max_batches`` run at once and the next
claim does not wait for the slowest job of the last batch (``bench/delivery.py``, one worker
process: 599 and 546 emails/s before, 606 and 604 after, in alternating runs; bench/README.md).

A claim also reads when the earliest job it left falls due, in the same round trip. After a claim
that took fewer than a full batch everything due was taken: the runner sleeps until woken or
that time, rather than claiming again at once or when a batch ends (each an empty claim and a
read, several per email when mail trickles in one at a time). Woken while batches of its own
run, it claims when one of them ends (``GATHER_SECONDS`` at most): mail arriving in a steady
stream (the relay's group commits, a few messages each) then goes out in batches of what came
meanwhile, with fewer claims, and fewer empty ones (every commit wakes every worker process).
A batch kind may start its jobs inside the claim's own transaction (``BatchStarter``: the
delivery's first step), one transaction fewer per batch.

A claim takes each kind's due jobs in due order, in a lane of its own (``jobs.claim_lanes``):
``batch_size`` of each kind, or a kind's own number (``lane_sizes``: automation steps, 256). A
flood of one kind's due jobs then neither fills another kind's claim nor is scanned past to
find it. Batches holding a wide lane's jobs (a kind of its own number) take at most every slot
but one (``max_batches - 1``): while they hold those, claims leave the wide lanes out, so the
other kinds' due jobs (deliveries) always have a slot, and are claimed again when one ends.

A kind may come first (``first_kinds``: a broadcast's expansion, ``workers/kinds.FIRST_KINDS``):
while one of its jobs runs, the worker runs one other batch beside it instead of
``max_batches``. Its process's CPU then goes mostly to filling the queue, and the emails it
accepts are delivered as fast afterwards by every worker; the other kinds' due jobs (a
transactional email) still go out meanwhile, one batch at a time, and at full width in the
other worker processes (bench/README.md, "Broadcasts", 2026-11-29: expansion first).

A batch kind's handler may hand off the jobs its batch made due (``core/jobs.Handoff``): the
runner claims them at once by their refs and runs them in the same batch slot. The emails a
batch of automation steps accepted are delivered right after its commit, as an API's emails are
when the API commits them, instead of after every step job due before them: a flood of steps
and the deliveries of the mail they already accepted overlap (``bench/automations.py``), and
since a slot delivers its own batch's mail before taking more steps, the steps go no faster
than their mail goes out.

While a claimed batch runs, a heartbeat extends the leases of its unfinished jobs every third of
the lease, so a slow job (an SMTP session trying several MX hosts) is never claimed twice; the
lease only bounds how long the jobs of a crashed worker wait. A batch done within a third of the
lease costs no extra statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field

from posthaste.core.ids import now_ms
from posthaste.core.jobs import Handoff
from posthaste.core.models import Job
from posthaste.errors import ServiceUnavailable
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Database, Tx

log = logging.getLogger(__name__)

GATHER_SECONDS = 0.05  # at most, woken while batches run, before claiming (``Worker._gather``)

Handler = Callable[[Job], Awaitable[None]]
# Takes every claimed job of its kind at once, so their database writes can be batched; may
# hand off the jobs the batch made due, for this worker to take at once.
BatchHandler = Callable[[list[Job]], Awaitable[Handoff | None]]
BatchRun = Callable[[], Awaitable[Handoff | None]]
# Starts a claimed batch inside the claim's transaction and returns what runs the rest of it
# after commit; None leaves the batch to the kind's ``BatchHandler``. If it raises, the claim
# rolls back with it, and the jobs are claimed again for their ``BatchHandler``.
BatchStarter = Callable[[Tx, list[Job]], Awaitable[BatchRun | None]]


@dataclass
class _Claim:
    jobs: list[Job] = field(default_factory=list)
    next_due: int | None = None
    started: dict[str, BatchRun] = field(default_factory=dict)  # by kind
    full: bool = False  # a lane took as many as it may: more may be due
    held_back: bool = False  # the wide lanes were left out: every slot but one is theirs


class _StartFailed(Exception):
    """A ``BatchStarter`` raised: its claim was rolled back."""


class Worker:
    def __init__(
        self,
        db: Database,
        handlers: Mapping[str, Handler],
        *,
        lease_seconds: float,
        batch_size: int = 32,
        max_batches: int = 4,
        idle_check: float = 30.0,
        gather_seconds: float = GATHER_SECONDS,
        batch_handlers: Mapping[str, BatchHandler] | None = None,
        batch_starters: Mapping[str, BatchStarter] | None = None,
        lane_sizes: Mapping[str, int] | None = None,
        first_kinds: Collection[str] = (),
    ) -> None:
        self.db = db
        self.handlers = dict(handlers)
        self.batch_handlers = dict(batch_handlers or {})
        self.batch_starters = {
            kind: start
            for kind, start in (batch_starters or {}).items()
            if kind in self.batch_handlers
        }
        self.kinds = [*self.handlers, *self.batch_handlers]
        self.lease_ms = int(lease_seconds * 1000)
        self.batch_size = batch_size
        self.max_batches = max_batches
        # Kinds claimed by a number of their own (``workers/kinds.py``), the others by batch_size.
        self.wide = {kind: n for kind, n in (lane_sizes or {}).items() if kind in self.kinds}
        self.lanes = {kind: self.wide.get(kind, batch_size) for kind in self.kinds}
        # Kinds whose job, while it runs, leaves one other batch beside it (``_slots``).
        self.first = frozenset(first_kinds) & set(self.kinds)
        # The running batches that hold jobs of a wide lane, and of a first kind.
        self._wide_batches: set[asyncio.Task[None]] = set()
        self._first_batches: set[asyncio.Task[None]] = set()
        self.idle_check = idle_check
        self.gather_seconds = gather_seconds
        self.name = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._wake = asyncio.Event()
        self._stopping = False
        self.processed = 0
        db.add_listener(jobs_repo.CHANNEL, self._wake.set)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Claim and run jobs until ``stop()``, up to ``max_batches`` batches at once; a
        failing job never stops the loop. On ``stop()`` the batches under way finish first."""
        running: set[asyncio.Task[None]] = set()
        try:
            while not self._stopping:
                self._wake.clear()  # before the claim: a commit during it is not missed
                if len(running) >= self._slots():
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    continue
                claim = await self._claim()
                if claim.jobs:
                    task = self._start(claim)
                    running.add(task)
                    task.add_done_callback(running.discard)
                if not claim.full:  # everything due was taken (held back: when a slot frees)
                    await self._sleep(claim.next_due, running if claim.held_back else set())
                    await self._gather(running)
            if running:
                await asyncio.wait(running)
        finally:
            # Cancelled (the process is going down hard): its batches stop between statements,
            # and their leases run out as after a crash. Waited for, so that no statement of
            # theirs (a lease extension) lands after the worker has stopped.
            under_way = list(running)
            for task in under_way:
                task.cancel()
            await asyncio.gather(*under_way, return_exceptions=True)

    def _start(self, claim: _Claim) -> asyncio.Task[None]:
        task = asyncio.create_task(self._run_all(claim))
        for batches, kinds in ((self._wide_batches, self.wide), (self._first_batches, self.first)):
            if any(job.kind in kinds for job in claim.jobs):
                batches.add(task)
                task.add_done_callback(batches.discard)
        return task

    def _slots(self) -> int:
        """Batches that may run at once: ``max_batches``, but while a first kind's job runs,
        that batch and one other (the process's CPU goes to it first; the other kinds' due jobs
        still go out, one batch at a time)."""
        if self._first_batches:
            return min(self.max_batches, len(self._first_batches) + 1)
        return self.max_batches

    def _lanes(self) -> tuple[dict[str, int], bool]:
        """This claim's lanes, and whether the wide ones were left out: they never hold every
        batch slot at once, so one slot is always left to claim the other kinds' due jobs."""
        if self.wide and len(self._wide_batches) >= max(1, self.max_batches - 1):
            return {k: n for k, n in self.lanes.items() if k not in self.wide}, True
        return self.lanes, False

    async def run_until_idle(self) -> int:
        """Run every job due now, then return how many ran (for tests and the CLI)."""
        before = self.processed
        while (claim := await self._claim()).jobs:
            await self._run_all(claim)
        return self.processed - before

    async def _claim(self) -> _Claim:
        try:
            return await self._claim_and_start(self.batch_starters)
        except _StartFailed as exc:
            log.error("starting a claimed batch failed; its jobs run apart", exc_info=exc.__cause__)
        except Exception:
            log.exception("claiming jobs failed; retrying shortly")
            await asyncio.sleep(1)
            return _Claim()
        try:
            return await self._claim_and_start({})
        except Exception:
            log.exception("claiming jobs failed; retrying shortly")
            await asyncio.sleep(1)
            return _Claim()

    async def _claim_and_start(
        self, starters: Mapping[str, BatchStarter], handoff: Handoff | None = None
    ) -> _Claim:
        async with self.db.transaction() as tx:
            if handoff is None:
                lanes, held_back = self._lanes()
                found = await jobs_repo.claim_lanes(tx, lanes, self.name, now_ms(), self.lease_ms)
                full = any(n >= lanes[kind] for kind, n in _count(found.jobs).items())
                claim = _Claim(found.jobs, found.next_due, full=full, held_back=held_back)
            else:
                claim = _Claim(await self._claim_handed(tx, handoff))
            for kind, start in starters.items():
                group = [job for job in claim.jobs if job.kind == kind]
                if not group:
                    continue
                try:
                    run = await start(tx, group)
                except ServiceUnavailable:
                    raise  # the database is away: no use claiming again without starting
                except Exception as exc:
                    raise _StartFailed from exc
                if run is not None:
                    claim.started[kind] = run
        return claim

    async def _claim_handed(self, tx: Tx, handoff: Handoff) -> list[Job]:
        if handoff.kind not in self.kinds:
            return []  # another worker's kind: it claims them in due order
        refs = list(handoff.refs)
        return await jobs_repo.claim_refs(
            tx, handoff.kind, refs, self.name, now_ms(), self.lease_ms
        )

    async def _take(self, handoff: Handoff) -> None:
        """Claim the handed-off jobs and run them as a claimed batch of their own. If the claim
        fails they are left due, for any worker's next claim."""
        try:
            claim = await self._claim_and_start(self.batch_starters, handoff)
        except _StartFailed as exc:
            log.error("starting handed-off jobs failed; they run apart", exc_info=exc.__cause__)
            claim = await self._claim_and_start({}, handoff)
        if claim.jobs:
            await self._run_all(claim)

    async def _run_all(self, claim: _Claim) -> None:
        jobs = claim.jobs
        held = {job.id: job for job in jobs}  # what the heartbeat keeps leased
        runs = [self._run_one(job, held) for job in jobs if job.kind not in self.batch_handlers]
        for kind, handler in self.batch_handlers.items():
            group = [job for job in jobs if job.kind == kind]
            if group:
                run = claim.started.get(kind) or functools.partial(handler, group)
                runs.append(self._run_batch(run, group, held))
        done = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(held, done))
        try:
            await asyncio.gather(*runs)
        finally:
            # Stopped between statements, not in one; if this task is cancelled (the worker
            # dies), the heartbeat stops too and the leases run out as after a crash.
            done.set()
            await heartbeat

    async def _run_batch(self, run: BatchRun, group: list[Job], held: dict[int, Job]) -> None:
        handoff = None
        try:
            handoff = await run()
        except ServiceUnavailable as exc:  # the database is away: no stack trace, it will return
            log.warning("a batch of %d %s jobs waits: %s", len(group), group[0].kind, exc.message)
        except Exception:
            # As for one job: the leases run out and the jobs are claimed again.
            fields = {"kind": group[0].kind, "refs": [job.ref for job in group]}
            log.exception(
                "a batch of %d %s jobs failed", len(group), group[0].kind, extra={"fields": fields}
            )
        finally:
            self.processed += len(group)
            for job in group:
                held.pop(job.id, None)
        if handoff is not None and handoff.refs:
            try:
                await self._take(handoff)
            except ServiceUnavailable as exc:
                log.warning(
                    "%d handed-off %s jobs wait: %s", len(handoff.refs), handoff.kind, exc.message
                )
            except Exception:
                log.exception(
                    "taking %d handed-off %s jobs failed; they stay due",
                    len(handoff.refs),
                    handoff.kind,
                )

    async def _run_one(self, job: Job, held: dict[int, Job]) -> None:
        try:
            await self.handlers[job.kind](job)
        except ServiceUnavailable as exc:
            log.warning("job %s (%s %s) waits: %s", job.id, job.kind, job.ref, exc.message)
        except Exception:
            # The lease runs out and the job is claimed again; the handler decides when to give up.
            fields = {"kind": job.kind, "refs": [job.ref]}
            log.exception(
                "job %s (%s %s) failed", job.id, job.kind, job.ref, extra={"fields": fields}
            )
        finally:
            self.processed += 1
            held.pop(job.id, None)

    async def _heartbeat(self, held: dict[int, Job], done: asyncio.Event) -> None:
        """Every third of the lease until ``done``, extend the leases of the jobs still held."""
        interval = self.lease_ms / 3000
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), interval)
            if done.is_set() or not held:
                return
            await self._extend(list(held.values()))

    async def _extend(self, held: list[Job]) -> None:
        try:
            async with self.db.transaction() as tx:
                kept = await jobs_repo.extend_many(tx, held, self.name, now_ms() + self.lease_ms)
        except Exception:
            # The next beat tries again; two more fit in before the lease runs out.
            log.exception("extending the lease of %d jobs failed", len(held))
            return
        if kept < len(held):
            log.debug(
                "%d of %d leases were not extended (released or lost)", len(held) - kept, len(held)
            )

    async def _gather(self, running: set[asyncio.Task[None]]) -> None:
        """Woken while batches run: let more jobs come in until one of them ends
        (``gather_seconds`` at most) before claiming them together."""
        if running and self.gather_seconds > 0 and not self._stopping:
            first = asyncio.FIRST_COMPLETED
            await asyncio.wait(running, timeout=self.gather_seconds, return_when=first)

    async def _sleep(self, next_due: int | None, running: set[asyncio.Task[None]]) -> None:
        """Until a job is committed, the earliest one left falls due (``idle_check`` at most),
        or one of ``running`` ends."""
        timeout = self.idle_check
        if next_due is not None:
            timeout = min(timeout, max(0.0, (next_due - now_ms()) / 1000))
        if timeout <= 0:
            return
        woken = asyncio.create_task(self._wake.wait())
        try:
            await asyncio.wait({woken, *running}, timeout=timeout, return_when=FIRST_COMPLETED)
        finally:
            woken.cancel()


def _count(claimed: list[Job]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in claimed:
        counts[job.kind] = counts.get(job.kind, 0) + 1
    return counts
