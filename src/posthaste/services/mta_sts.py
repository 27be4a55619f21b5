"""Each recipient domain's MTA-STS policy (RFC 8461), and the TLS sessions it saw.

Delivery never fetches a policy. ``MtaStsPolicies.policy_for`` reads the domain's ``_mta-sts``
TXT record (remembered in this process for ``memo_seconds``) and applies what the database
caches (``core.mta_sts.plan_policy``): a live cached policy applies, and when the record
announces another id or half its ``max_age`` has passed, a ``refresh_mta_sts`` job is asked for
and fetches it in the background (RFC 8461 §5.1: the cached policy is used meanwhile). A domain
with nothing usable cached (first contact, or its policy expired) is the one case that needs a
fetch before its mail goes: its mail is held unsent (no attempt used up) for ``wait_ms`` while
the job runs, and goes as without a policy if none could be had after ``patience_ms``.

``PolicyRefresher`` runs those jobs: one per domain in the queue however many workers ask
(``jobs.request``, twins settled), and a job that finds the cache already fresh fetches
nothing. A failed fetch keeps a live policy (tried again with back-off) or, with none, is
stored so that the domain goes without a policy, its failure counted in the TLS reports, and
is not fetched again for five minutes. ``record`` adds a delivery session's TLS outcomes to the
day's counts (``services/tls_reports.py`` turns them into reports).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from posthaste.adapters.dns import DnsTemporaryFailure, Resolver
from posthaste.adapters.mta_sts_http import PolicyFetcher, PolicyFetchError
from posthaste.adapters.smtp_client import Transcript
from posthaste.core.ids import format_ms, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job
from posthaste.core.mta_sts import (
    FAILED_FETCH_PAUSE_MS,
    CachedPolicy,
    PolicyError,
    Refresh,
    StsDecision,
    StsMode,
    StsRecord,
    parse_policy,
    parse_record,
    plan_policy,
)
from posthaste.core.tls_reports import PolicyType, TlsCount, TlsOutcome, TlsResult, day_of
from posthaste.services.metrics import Metrics
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import mta_sts as repo
from posthaste.storage.database import Database

log = logging.getLogger(__name__)

MEMO_SECONDS = 60.0
WAIT_MS = 2_000  # how long mail to a domain waits, each time, for its first policy fetch
PATIENCE_MS = 120_000  # after this, mail goes as without a policy while the fetch is pending
RETRY_MS = 5 * 60_000  # a failed refresh of a live policy is tried again after 5, 10, 20 ... min
RETRY_MAX_MS = 3_600_000


class MtaStsPolicies:
    """The ``TlsPolicies`` of ``mx`` delivery (``adapters/smtp_transports.py``)."""

    def __init__(
        self,
        db: Database,
        resolver: Resolver,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], int] = now_ms,
        memo_seconds: float = MEMO_SECONDS,
        wait_ms: int = WAIT_MS,
        patience_ms: int = PATIENCE_MS,
    ) -> None:
        self.db = db
        self.resolver = resolver
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.memo_seconds = memo_seconds
        self.wait_ms = wait_ms
        self.patience_ms = patience_ms
        # domain: (until, decision, why), ``until`` on the monotonic clock
        self._memo: dict[str, tuple[float, StsDecision, str]] = {}

    async def policy_for(self, domain: str, transcript: Transcript) -> StsDecision:
        """The policy that applies to mail for ``domain`` now (``hold_until``: wait for it);
        each decision is noted."""
        remembered = self._memo.get(domain)
        if remembered is not None and time.monotonic() < remembered[0]:
            _, decision, why = remembered
        else:
            decision, why = await self._resolve(domain, transcript)
            self._remember(domain, decision, why)
        if why:
            transcript.note(f"MTA-STS {domain}: {why}")
        if decision.policy is not None:
            policy = decision.policy
            transcript.note(
                f"MTA-STS {domain}: mode {policy.mode}, mx {', '.join(policy.mx) or '-'} "
                f"(policy id {decision.record_id})"
            )
        return decision

    def _remember(self, domain: str, decision: StsDecision, why: str) -> None:
        seconds = self.memo_seconds
        if decision.hold_until is not None:  # until the mail comes back, not longer
            seconds = min(seconds, max(0, decision.hold_until - self.clock()) / 1000)
        if len(self._memo) > 10_000:
            self._memo.clear()
        self._memo[domain] = (time.monotonic() + seconds, decision, why)

    async def _resolve(self, domain: str, transcript: Transcript) -> tuple[StsDecision, str]:
        """The decision and why (for the transcript; '' when there is nothing to say)."""
        now = self.clock()
        record = await self._record(domain, transcript)
        async with self.db.read() as tx:
            cached = await repo.cached_policy(tx, domain)
        plan = plan_policy(record, cached, now)
        if plan.refresh is Refresh.NONE and plan.decision is not None:
            return plan.decision, plan.why
        async with self.db.transaction() as tx:
            asked = await jobs_repo.request(tx, JobKind.REFRESH_MTA_STS, domain, now, now)
        if plan.decision is not None:
            return plan.decision, plan.why
        assert record is not None  # only a record's policy is waited for
        if now - asked < self.patience_ms:
            return StsDecision(record_id=record.id, hold_until=now + self.wait_ms), plan.why
        why = (
            f"policy id {record.id} not fetched after {self.patience_ms // 1000} s; "
            "sending as without a policy"
        )
        return StsDecision(None, record.id, str(TlsResult.STS_POLICY_FETCH_ERROR)), why

    async def _record(self, domain: str, transcript: Transcript) -> StsRecord | None:
        try:
            return parse_record(await self.resolver.txt(f"_mta-sts.{domain}"))
        except (DnsTemporaryFailure, PolicyError) as exc:
            transcript.note(f"MTA-STS {domain}: TXT record not usable: {exc}")
            return None

    async def record(
        self, domain: str, decision: StsDecision, outcomes: Sequence[TlsOutcome]
    ) -> None:
        """Count the session's TLS outcomes for the domain's daily TLS report (and, in the
        metrics, a session that ``enforce`` deferred: no MX host gave verified TLS)."""
        verified = any(outcome.result is TlsResult.SUCCESS for outcome in outcomes)
        if decision.mode is StsMode.ENFORCE and outcomes and not verified:
            self.metrics.mta_sts_deferral()
        counts = session_counts(day_of(self.clock()), domain, decision, outcomes)
        if counts:
            async with self.db.transaction() as tx:
                await repo.add_counts(tx, counts)


class PolicyRefresher:
    """The ``refresh_mta_sts`` jobs: fetch a domain's policy over HTTPS, off the delivery path."""

    def __init__(
        self,
        db: Database,
        resolver: Resolver,
        fetcher: PolicyFetcher,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.db = db
        self.resolver = resolver
        self.fetcher = fetcher
        self.metrics = metrics or Metrics()
        self.clock = clock

    async def run(self, job: Job) -> None:
        """One domain's job (``ref`` is the domain): done, or due again after a failure."""
        async with self.db.transaction() as tx:
            if not await jobs_repo.settle_twins(tx, job, job.ref, exact=True):
                await jobs_repo.finish(tx, job)  # an elder twin does the work
                return
        again = await self.refresh(job.ref, tries=job.attempts)
        async with self.db.transaction() as tx:
            if again is None:
                await jobs_repo.finish(tx, job)
            else:
                await jobs_repo.retry_at(tx, job, again)

    async def refresh(self, domain: str, tries: int = 1) -> int | None:
        """Fetch the domain's policy when what is cached calls for it (another worker may have
        fetched it meanwhile); when to try again, None when done."""
        now = self.clock()
        try:
            record = parse_record(await self.resolver.txt(f"_mta-sts.{domain}"))
        except DnsTemporaryFailure as exc:
            log.warning("MTA-STS %s: TXT lookup failed (%s); trying again later", domain, exc)
            return now + _backoff(tries)
        except PolicyError as exc:
            log.info("MTA-STS %s: TXT record not usable (%s); nothing fetched", domain, exc)
            return None
        async with self.db.read() as tx:
            cached = await repo.cached_policy(tx, domain)
        if record is None or plan_policy(record, cached, now).refresh is Refresh.NONE:
            return None
        try:
            text = await self.fetcher.fetch(domain)
            policy = parse_policy(text)
        except (PolicyFetchError, PolicyError) as exc:
            self.metrics.mta_sts_fetch(False)
            return await self._failed(domain, record, cached, exc, now, tries)
        self.metrics.mta_sts_fetch(True)
        expires = now + policy.max_age * 1000
        async with self.db.transaction() as tx:
            await repo.save_policy(tx, CachedPolicy(domain, record.id, text, now, expires))
        log.info(
            "MTA-STS %s: fetched policy id %s (mode %s), cached until %s",
            domain,
            record.id,
            policy.mode,
            format_ms(expires),
        )
        return None

    async def _failed(
        self,
        domain: str,
        record: StsRecord,
        cached: CachedPolicy | None,
        exc: PolicyFetchError | PolicyError,
        now: int,
        tries: int,
    ) -> int | None:
        """A live policy stays in force (RFC 8461 §5.1) and is tried again later; with none,
        the failure is stored: the domain goes without a policy until it is tried again."""
        result = exc.result if isinstance(exc, PolicyFetchError) else TlsResult.STS_POLICY_INVALID
        if cached is not None and cached.live(now):
            again = now + _backoff(tries)
            log.warning(
                "MTA-STS %s: policy id %s fetch failed (%s: %s); keeping policy id %s, "
                "trying again at %s",
                domain,
                record.id,
                result,
                exc,
                cached.record_id,
                format_ms(again),
            )
            return again
        log.warning(
            "MTA-STS %s: policy id %s fetch failed (%s: %s); sending as without a policy",
            domain,
            record.id,
            result,
            exc,
        )
        failure = CachedPolicy(
            domain, record.id, "", now, now + FAILED_FETCH_PAUSE_MS, str(result), str(exc)[:500]
        )
        async with self.db.transaction() as tx:
            await repo.save_policy(tx, failure)
        return None


def _backoff(tries: int) -> int:
    return int(min(RETRY_MS * 2 ** max(0, tries - 1), RETRY_MAX_MS))


def session_counts(
    day: str, domain: str, decision: StsDecision, outcomes: Sequence[TlsOutcome]
) -> list[TlsCount]:
    """The counts of one session's outcomes: a policy that could not be fetched turns each
    success into that failure (the session went without its policy). The sending address is
    kept for failures only (the reports name it in their failure details)."""
    kind = PolicyType.STS if decision.record_id else PolicyType.NO_POLICY_FOUND
    text = decision.policy.text if decision.policy is not None else ""
    merged: dict[tuple[TlsResult, str, str, str], int] = {}
    for outcome in outcomes:
        result = outcome.result
        if decision.fetch_error and result is TlsResult.SUCCESS:
            result = TlsResult(decision.fetch_error)
        sending = "" if result is TlsResult.SUCCESS else outcome.sending_ip
        key = (result, outcome.mx_host, outcome.receiving_ip, sending)
        merged[key] = merged.get(key, 0) + 1
    return [
        TlsCount(day, domain, kind, decision.record_id, result, host, ip, sessions, text, sending)
        for (result, host, ip, sending), sessions in merged.items()
    ]
