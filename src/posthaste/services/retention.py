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
transaction (a few hundred rows), and the loop rests between batches as long as the batch took:
sends go on beside it.
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
    ) -> None:
        self.db = db
        self.retention_ms = retention_days * DAY_MS
        self.batch = batch
        self.clock = clock
        self.rest = rest

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
            started = time.monotonic()
            async with self.db.read() as tx:
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
                report.emails += len(done)
            for row in page:
                clean = clean and row.status not in UNFINISHED
                if clean:
                    mark = row.id
            after = page[-1].id
            batches += 1
            await self._progress(job, f"sent:{mark}", batches, started)

    async def purge_received(self, job: Job | None, mark: str, report: PurgeReport) -> str:
        below, after = self.cutoff(), mark
        batches = 0
        while True:
            started = time.monotonic()
            async with self.db.read() as tx:
                page = await repo.received_page(tx, after, below, self.batch)
            if not page:
                return mark
            async with self.db.transaction() as tx:
                report.blobs += await repo.purge_received_content(
                    tx, [row.id for row in page], [row.raw_blob_id for row in page]
                )
            report.emails += len(page)
            mark = after = page[-1].id
            batches += 1
            await self._progress(job, f"received:{mark}", batches, started)

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
            started = time.monotonic()
            async with self.db.transaction() as tx:
                deleted = await step(tx)
            if deleted:
                report.rows[name] = report.rows.get(name, 0) + deleted
            if deleted < self.batch:
                return
            await self._rest(started)

    async def _progress(self, job: Job | None, ref: str, batches: int, started: float) -> None:
        if job is not None and batches % PROGRESS_EVERY == 0:
            async with self.db.transaction() as tx:
                await jobs_repo.note(tx, job, ref)
        await self._rest(started)

    async def _rest(self, started: float) -> None:
        """Between two batches: the send path goes first (a pause of ``rest`` times the
        batch's own duration)."""
        await asyncio.sleep((time.monotonic() - started) * self.rest)
