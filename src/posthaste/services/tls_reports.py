"""The daily TLS reports (RFC 8460), made from the TLS sessions ``services/mta_sts.py`` counted.

One recurring ``tls_report`` job, due a few minutes after each UTC midnight: for every past day
with counts, each policy domain publishing a ``v=TLSRPTv1`` record at ``_smtp._tls.<domain>``
gets one report, stored (``posthaste tls-reports``) and POSTed gzipped to each ``https:`` rua.
``mailto:`` rua are recorded as not sent: Posthaste sends mail only as a team's verified
domain, and a report belongs to no team (docs/deliverability.md). A day whose reports could not
all be made (a DNS failure) is kept and tried again an hour later, for two days at most; a
report already made is not made twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import mta_sts as repo
from posthaste.storage.database import Database

log = logging.getLogger(__name__)

REF = "tls-report:"
AFTER_MIDNIGHT_MS = 10 * 60_000  # the run's time each day: 00:10 UTC
RETRY_MS = 3_600_000
GIVE_UP_AFTER_MS = 2 * DAY_MS  # a day not reported by then is given up


class TlsReportService:
    def __init__(
        self,
        db: Database,
        resolver: Resolver,
        fetcher: PolicyFetcher,
        organization: str,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.db = db
        self.resolver = resolver
        self.fetcher = fetcher
        self.organization = organization
        self.clock = clock

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
            day_done = True
            # A domain whose record cannot be looked up for days no longer holds its day back.
            patient = day >= day_of(self.clock() - GIVE_UP_AFTER_MS)
            for domain, group in by_domain.items():
                if domain not in made:
                    reported = await self._report(day, domain, group)
                    day_done = (reported or not patient) and day_done
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
        deliveries = [await self._deliver(address, report) for address in addresses]
        async with self.db.transaction() as tx:
            await repo.save_report(tx, day, domain, report, deliveries, self.clock())
        return True

    async def _deliver(self, address: ReportAddress, report: dict[str, Any]) -> dict[str, str]:
        if address.scheme != "https":
            reason = "mailto reports are not sent; only https rua are delivered"
            return {"rua": address.uri, "status": "not_sent", "detail": reason}
        result = await self.fetcher.post_report(address.uri, gzip_report(report))
        status = "sent" if result.ok else "failed"
        return {"rua": address.uri, "status": status, "detail": result.detail}

    async def list(self, day: str | None = None, limit: int = 100) -> list[repo.StoredReport]:
        """The reports produced, newest day first."""
        async with self.db.read() as tx:
            return await repo.list_reports(tx, day, limit)
