"""The retention purge: what is older than ``POSTHASTE_RETENTION_DAYS`` goes, in small batches.

Two recurring ``purge`` jobs, each run by one worker at a time and due again an hour after it
finishes:

- ``sent:<mark>``: the bodies, raw messages and attachments of sent mail, then the events,
  delivery attempts, webhook deliveries and webhook attempts. The email rows stay with their
  status, addresses, subject and tags. An email still queued, scheduled or sending keeps its
  content whatever its age (it is needed to send it).
- ``received:<mark>``: the bodies, raw messages and attachment lists of received mail.

``<mark>`` is the id up to which every email was seen purged: the next run walks on from there,
so a run costs what arrived since the last one, not the whole history. An email that was not
final yet holds the mark back, to be purged by a later run. Each batch is its own short
transaction (a few hundred rows), and the loop rests between batches as long as the batch took,
and on PostgreSQL at least as long as writing the batch's WAL at ``WAL_RATE`` would take: every
durable commit of the cluster waits for the log written before it to reach the disk, so a purge
that wrote its log as fast as it can would make every send wait for it (bench/README.md, "The
retention purge under load").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from posthaste.core.ids import id_floor, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job
from posthaste.core.status import EmailStatus
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import retention as repo
from posthaste.storage.database import Database, Tx

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
INTERVAL_MS = 3_600_000  # a finished run is due again an hour later
PROGRESS_EVERY = 20  # batches between two notes of the mark in the job (a crash resumes there)
AREAS = ("sent", "received")
# After each batch the purge rests this many times as long as the batch took: it uses at most
# half of one connection's time and of a core, however much there is to purge, and sending keeps
# the rest (bench/purge.py).
REST = 1.0
# PostgreSQL: the WAL the purge lets the cluster write per second, its own and the rest (bytes).
# Purging touches every page of old data once, and each page's first change after a checkpoint
# is logged whole: 1,000,000 rows made 767 MiB of WAL, at 10.6 MiB/s when paced by time alone.
WAL_RATE = 4 * 2**20
# Content that delivery still needs: kept whatever its age.
UNFINISHED = frozenset({EmailStatus.QUEUED, EmailStatus.SCHEDULED, EmailStatus.SENDING})


@dataclass
class PurgeReport:
    """What one run removed (for the log, the tests and the benchmark)."""

    emails: int = 0  # emails whose content was removed
    blobs: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # table → rows deleted


class RetentionService:
    def __init__(
        self,
        db: Database,
        retention_days: int,
        *,
        batch: int = 500,
        clock: Callable[[], int] = now_ms,
        rest: float = REST,
        wal_rate: float = WAL_RATE,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.db = db
        self.retention_ms = retention_days * DAY_MS
        self.batch = batch
        self.clock = clock
        self.rest = rest
        self.wal_rate = wal_rate
        self.sleep = sleep

    async def ensure_scheduled(self) -> None:
        """Enqueue the purge jobs that do not exist yet (at start-up, once per deployment)."""
        now = self.clock()
        async with self.db.transaction() as tx:
            for area in AREAS:
                await jobs_repo.ensure(tx, JobKind.PURGE, f"{area}:", f"{area}:", now)

    def cutoff(self) -> str:
        """Ids below this were made before the retention period began."""
        return id_floor(self.clock() - self.retention_ms)

    async def purge(self, job: Job) -> None:
        """The ``purge`` job: one run of its area, then due again in an hour."""
        area, _, mark = job.ref.partition(":")
        async with self.db.transaction() as tx:
            if not await jobs_repo.settle_twins(tx, job, f"{area}:"):
                await jobs_repo.finish(tx, job)  # an older twin does this area's work
                return
        report = PurgeReport()
        if area == "sent":
            mark = await self.purge_sent(job, mark, report)
            await self.purge_logs(report)
        elif area == "received":
            mark = await self.purge_received(job, mark, report)
        else:
            log.warning("purge job %s has an unknown area %r; dropped", job.id, job.ref)
            async with self.db.transaction() as tx:
                await jobs_repo.finish(tx, job)
            return
        async with self.db.transaction() as tx:
            await jobs_repo.note(tx, job, f"{area}:{mark}", self.clock() + INTERVAL_MS)
        if report.emails or report.rows:
            log.info("retention purge (%s): %s", area, report)

    async def purge_sent(self, job: Job | None, mark: str, report: PurgeReport) -> str:
        """Sent mail's content below the cut-off, walking on from ``mark``; the new mark."""
        below, after, clean = self.cutoff(), mark, True
        batches = 0
        while True:
            batch = _Batch()
            async with self.db.read() as tx:
                await batch.begin(tx)
                page = await repo.sent_page(tx, after, below, self.batch)
            if not page:
                return mark
            done = [row for row in page if row.status not in UNFINISHED]
            if done:
                async with self.db.transaction() as tx:
                    report.blobs += await repo.purge_sent_content(
                        tx,
                        [row.id for row in done],
                        [row.raw_blob_id for row in done if row.raw_blob_id is not None],
                    )
                    await batch.end(tx)
                report.emails += len(done)
            for row in page:
                clean = clean and row.status not in UNFINISHED
                if clean:
                    mark = row.id
            after = page[-1].id
            batches += 1
            await self._progress(job, f"sent:{mark}", batches, batch)

    async def purge_received(self, job: Job | None, mark: str, report: PurgeReport) -> str:
        below, after = self.cutoff(), mark
        batches = 0
        while True:
            batch = _Batch()
            async with self.db.read() as tx:
                await batch.begin(tx)
                page = await repo.received_page(tx, after, below, self.batch)
            if not page:
                return mark
            async with self.db.transaction() as tx:
                report.blobs += await repo.purge_received_content(
                    tx, [row.id for row in page], [row.raw_blob_id for row in page]
                )
                await batch.end(tx)
            report.emails += len(page)
            mark = after = page[-1].id
            batches += 1
            await self._progress(job, f"received:{mark}", batches, batch)

    async def purge_logs(self, report: PurgeReport) -> None:
        """Events, delivery attempts, webhook deliveries and webhook attempts below the cut-off.
        Deliveries go before their events, so none is left pointing at a deleted event."""
        below = self.cutoff()
        async with self.db.read() as tx:
            endpoints = await repo.webhook_ids(tx)
        for webhook_id in endpoints:
            step = partial(
                repo.delete_deliveries_below, webhook_id=webhook_id, below=below, limit=self.batch
            )
            await self._drain("webhook_deliveries", report, step)
        for table, key in repo.LOG_TABLES:
            step = partial(repo.delete_below, table=table, key=key, below=below, limit=self.batch)
            await self._drain(table.name, report, step)

    async def _drain(
        self, name: str, report: PurgeReport, step: Callable[[Tx], Awaitable[int]]
    ) -> None:
        while True:
            batch = _Batch()
            async with self.db.transaction() as tx:
                await batch.begin(tx)
                deleted = await step(tx)
                await batch.end(tx)
            if deleted:
                report.rows[name] = report.rows.get(name, 0) + deleted
            if deleted < self.batch:
                return
            await self._rest(batch)

    async def _progress(self, job: Job | None, ref: str, batches: int, batch: _Batch) -> None:
        if job is not None and batches % PROGRESS_EVERY == 0:
            async with self.db.transaction() as tx:
                await jobs_repo.note(tx, job, ref)
        await self._rest(batch)

    async def _rest(self, batch: _Batch) -> None:
        """Between two batches the send path goes first: a pause of ``rest`` times the batch's
        own duration, and at least as long as the WAL written during the batch takes at
        ``wal_rate``."""
        await self.sleep(self.pause(time.monotonic() - batch.started, batch.wal_written))

    def pause(self, took: float, wal_written: int) -> float:
        """The rest after a batch that took ``took`` seconds while the cluster wrote
        ``wal_written`` bytes of WAL (0 where unknown: SQLite)."""
        return max(took * self.rest, wal_written / self.wal_rate)


class _Batch:
    """One batch's start: when it began and, on PostgreSQL, where the WAL was then."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.wal_written = 0
        self._wal_at: int | None = None

    async def begin(self, tx: Tx) -> None:
        self._wal_at = await repo.wal_position(tx)

    async def end(self, tx: Tx) -> None:
        """Before the batch's transaction commits (its commit record is a few bytes)."""
        if self._wal_at is not None:
            now = await repo.wal_position(tx)
            self.wal_written = max(0, (now or 0) - self._wal_at)
