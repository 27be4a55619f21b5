"""The daily TLS reports (RFC 8460), made from the TLS sessions ``services/mta_sts.py`` counted.

One recurring ``tls_report`` job, due a few minutes after each UTC midnight: for every past day
with counts, each policy domain publishing a ``v=TLSRPTv1`` record at ``_smtp._tls.<domain>``
gets one report, stored (``posthaste tls-reports``) and POSTed gzipped to each ``https:`` rua;
the domains are looked up and reported ``concurrency`` at a time. An upload that fails is tried
again by an ``upload_tls_report`` job (``UPLOAD_RETRIES_MS`` apart), each outcome written into the
stored report's ``deliveries``, logged and counted in the metrics. ``mailto:`` rua are recorded
as not sent: Posthaste sends mail only as a team's verified domain, and a report belongs to no
team (docs/deliverability.md). A day whose reports could not all be made (a DNS failure) is kept
and tried again an hour later, for two days at most; a report already made is not made twice.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from posthaste.adapters.dns import DnsTemporaryFailure, Resolver
from posthaste.adapters.mta_sts_http import PolicyFetcher
from posthaste.core.ids import now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job
from posthaste.core.mta_sts import PolicyError
from posthaste.core.tls_reports import (
    DAY_MS,
    ReportAddress,
    TlsCount,
    build_report,
    day_of,
    day_start_ms,
    gzip_report,
    parse_tlsrpt,
)
from posthaste.services.metrics import Metrics
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import mta_sts as repo
from posthaste.storage.database import Database

log = logging.getLogger(__name__)

REF = "tls-report:"
AFTER_MIDNIGHT_MS = 10 * 60_000  # the run's time each day: 00:10 UTC
RETRY_MS = 3_600_000
GIVE_UP_AFTER_MS = 2 * DAY_MS  # a day not reported by then is given up
CONCURRENCY = 16  # domains looked up and reported at once
# A failed https upload is tried again after each of these (then given up): 4 tries in 5 hours.
UPLOAD_RETRIES_MS = (10 * 60_000, 3_600_000, 4 * 3_600_000)


class TlsReportService:
    def __init__(
        self,
        db: Database,
        resolver: Resolver,
        fetcher: PolicyFetcher,
        organization: str,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], int] = now_ms,
        concurrency: int = CONCURRENCY,
        retries_ms: Sequence[int] = UPLOAD_RETRIES_MS,
    ) -> None:
        self.db = db
        self.resolver = resolver
        self.fetcher = fetcher
        self.organization = organization
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.concurrency = concurrency
        self.retries_ms = tuple(retries_ms)

    async def ensure_scheduled(self) -> None:
        """Enqueue the daily job unless it exists (at start-up)."""
        now = self.clock()
        async with self.db.transaction() as tx:
            await jobs_repo.ensure(tx, JobKind.TLS_REPORT, REF, REF, now)

    async def run(self, job: Job) -> None:
        """The ``tls_report`` job: the reports of every finished day, then due tomorrow."""
        async with self.db.transaction() as tx:
            if not await jobs_repo.settle_twins(tx, job, REF):
                await jobs_repo.finish(tx, job)
                return
        complete = await self.produce()
        now = self.clock()
        due = day_start_ms(day_of(now)) + DAY_MS + AFTER_MIDNIGHT_MS
        async with self.db.transaction() as tx:
            await jobs_repo.note(tx, job, REF, due if complete else now + RETRY_MS)

    async def produce(self) -> bool:
        """Make the reports of the days before today; False when some must wait for a retry."""
        async with self.db.read() as tx:
            days = await repo.counted_days(tx, day_of(self.clock()))
        complete = True
        for day in days:
            async with self.db.read() as tx:
                counts = await repo.counts_of_day(tx, day)
                made = await repo.reported_domains(tx, day)
            by_domain: dict[str, list[TlsCount]] = {}
            for count in counts:
                by_domain.setdefault(count.policy_domain, []).append(count)
            # A domain whose record cannot be looked up for days no longer holds its day back.
            patient = day >= day_of(self.clock() - GIVE_UP_AFTER_MS)
            reported = await self._bounded(
                [
                    functools.partial(self._report, day, domain, group)
                    for domain, group in by_domain.items()
                    if domain not in made
                ]
            )
            day_done = all(reported) or not patient
            if day_done:
                async with self.db.transaction() as tx:
                    await repo.drop_day(tx, day)
            complete = complete and day_done
        return complete

    async def _report(self, day: str, domain: str, counts: list[TlsCount]) -> bool:
        """The domain's report for ``day`` when it asks for one; False to try again later."""
        try:
            addresses = parse_tlsrpt(await self.resolver.txt(f"_smtp._tls.{domain}"))
        except DnsTemporaryFailure as exc:
            log.warning("TLS report of %s for %s: %s; trying again later", domain, day, exc)
            return False
        except PolicyError as exc:
            log.info("TLS report of %s for %s not made: %s", domain, day, exc)
            return True
        if addresses is None:
            return True  # no TLSRPT record: no report wanted
        report = build_report(
            day,
            domain,
            counts,
            organization=self.organization,
            contact=f"postmaster@{self.organization}",
        )
        body = gzip_report(report)
        deliveries = [await self._deliver(domain, address, body) for address in addresses]
        now = self.clock()
        async with self.db.transaction() as tx:
            report_id = await repo.save_report(tx, day, domain, report, deliveries, now)
            if report_id is not None and _retrying(deliveries):
                due = now + self.retries_ms[0]
                await jobs_repo.enqueue(tx, JobKind.UPLOAD_TLS_REPORT, report_id, None, due, now)
        return True

    async def _deliver(self, domain: str, address: ReportAddress, body: bytes) -> dict[str, Any]:
        """The first try of one rua: what became of it (``deliveries``' entry)."""
        if address.scheme != "https":
            reason = "mailto reports are not sent; only https rua are delivered"
            return {"rua": address.uri, "status": "not_sent", "detail": reason}
        return await self._upload(domain, {"rua": address.uri, "tries": 0}, body)

    async def _upload(self, domain: str, entry: dict[str, Any], body: bytes) -> dict[str, Any]:
        """One more try of an https rua; ``entry`` with its outcome, logged and counted."""
        tries = int(entry.get("tries", 1)) + 1
        result = await self.fetcher.post_report(entry["rua"], body)
        if result.ok:
            status = "sent"
            log.info("TLS report of %s sent to %s (%s)", domain, entry["rua"], result.detail)
        else:
            status = "retrying" if tries <= len(self.retries_ms) else "failed"
            then = "; trying again later" if status == "retrying" else "; given up"
            rua, detail = entry["rua"], result.detail
            log.warning(
                "TLS report of %s to %s failed (try %d): %s%s", domain, rua, tries, detail, then
            )
        self.metrics.tls_report_upload(status)
        return {**entry, "status": status, "detail": result.detail, "tries": tries}

    async def retry_uploads(self, job: Job) -> None:
        """The ``upload_tls_report`` job (``ref``: the report's id): another try of each of its
        uploads still ``retrying``; due again after the next delay while one still is."""
        async with self.db.read() as tx:
            stored = await repo.get_report(tx, job.ref)
        deliveries = [] if stored is None else stored.deliveries
        if stored is not None and _retrying(deliveries):
            body = gzip_report(stored.report)
            domain = stored.policy_domain
            deliveries = [
                await self._upload(domain, entry, body) if entry["status"] == "retrying" else entry
                for entry in deliveries
            ]
        tries = [int(d.get("tries", 1)) for d in deliveries if d["status"] == "retrying"]
        async with self.db.transaction() as tx:
            if stored is not None:
                await repo.set_deliveries(tx, stored.id, deliveries)
            if tries:
                await jobs_repo.retry_at(tx, job, self.clock() + self.retries_ms[max(tries) - 1])
            else:
                await jobs_repo.finish(tx, job)

    async def _bounded(self, calls: list[Callable[[], Awaitable[bool]]]) -> list[bool]:
        """Every call's answer, ``concurrency`` of them under way at once."""
        gate = asyncio.Semaphore(self.concurrency)

        async def gated(call: Callable[[], Awaitable[bool]]) -> bool:
            async with gate:
                return await call()

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(gated(call)) for call in calls]
        return [task.result() for task in tasks]

    async def list(self, day: str | None = None, limit: int = 100) -> list[repo.StoredReport]:
        """The reports produced, newest day first."""
        async with self.db.read() as tx:
            return await repo.list_reports(tx, day, limit)


def _retrying(deliveries: list[dict[str, Any]]) -> bool:
    return any(entry["status"] == "retrying" for entry in deliveries)
