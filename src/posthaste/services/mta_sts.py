"""Each recipient domain's MTA-STS policy (RFC 8461), and the TLS sessions it saw.

``policy_for`` reads the domain's ``_mta-sts`` TXT record at each delivery (remembered in this
process for ``memo_seconds``) and applies the policy cached in the database while its
``max_age`` lasts and the record's ``id`` is unchanged; otherwise (or once half its
``max_age`` has passed, to renew it before it expires) it fetches the policy over HTTPS and
caches it. A failed fetch keeps an unexpired cached policy in force (RFC 8461 §5.1); with none,
the domain is treated as having no policy, and the failure is counted for its TLS report.
``record`` adds a delivery session's TLS outcomes to the day's counts (``services/tls_reports.py``
turns them into reports).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from posthaste.adapters.dns import DnsTemporaryFailure, Resolver
from posthaste.adapters.mta_sts_http import PolicyFetcher, PolicyFetchError
from posthaste.adapters.smtp_client import Transcript
from posthaste.core.ids import format_ms, now_ms
from posthaste.core.mta_sts import (
    NO_POLICY,
    PolicyError,
    StsDecision,
    StsRecord,
    parse_policy,
    parse_record,
)
from posthaste.core.tls_reports import PolicyType, TlsCount, TlsOutcome, TlsResult, day_of
from posthaste.storage import mta_sts as repo
from posthaste.storage.database import Database

MEMO_SECONDS = 60.0


class MtaStsPolicies:
    """The ``TlsPolicies`` of ``mx`` delivery (``adapters/smtp_transports.py``)."""

    def __init__(
        self,
        db: Database,
        resolver: Resolver,
        fetcher: PolicyFetcher,
        *,
        clock: Callable[[], int] = now_ms,
        memo_seconds: float = MEMO_SECONDS,
    ) -> None:
        self.db = db
        self.resolver = resolver
        self.fetcher = fetcher
        self.clock = clock
        self.memo_seconds = memo_seconds
        self._memo: dict[str, tuple[float, StsDecision]] = {}

    async def policy_for(self, domain: str, transcript: Transcript) -> StsDecision:
        """The policy that applies to mail for ``domain`` now; each decision is noted."""
        remembered = self._memo.get(domain)
        if remembered is not None and time.monotonic() - remembered[0] < self.memo_seconds:
            decision = remembered[1]
        else:
            decision = await self._resolve(domain, transcript)
            if len(self._memo) > 10_000:
                self._memo.clear()
            self._memo[domain] = (time.monotonic(), decision)
        if decision.policy is not None:
            policy = decision.policy
            transcript.note(
                f"MTA-STS {domain}: mode {policy.mode}, mx {', '.join(policy.mx) or '-'} "
                f"(policy id {decision.record_id})"
            )
        return decision

    async def _resolve(self, domain: str, transcript: Transcript) -> StsDecision:
        now = self.clock()
        async with self.db.read() as tx:
            cached = await repo.cached_policy(tx, domain)
        live = cached if cached is not None and cached.expires_at > now else None
        try:
            record = parse_record(await self.resolver.txt(f"_mta-sts.{domain}"))
        except (DnsTemporaryFailure, PolicyError) as exc:
            transcript.note(f"MTA-STS {domain}: TXT record not usable: {exc}")
            record = None
        if record is None:
            if live is None:
                return NO_POLICY
            transcript.note(f"MTA-STS {domain}: cached policy until {format_ms(live.expires_at)}")
            return _decision(live.policy, live.record_id)
        if live is not None and live.record_id == record.id and not _half_spent(live, now):
            return _decision(live.policy, live.record_id)
        return await self._refresh(domain, record, live, transcript, now)

    async def _refresh(
        self,
        domain: str,
        record: StsRecord,
        live: repo.CachedPolicy | None,
        transcript: Transcript,
        now: int,
    ) -> StsDecision:
        """Fetch the policy the TXT record announces; on failure, the cached one if any."""
        try:
            text = await self.fetcher.fetch(domain)
            policy = parse_policy(text)
        except (PolicyFetchError, PolicyError) as exc:
            result = (
                exc.result if isinstance(exc, PolicyFetchError) else TlsResult.STS_POLICY_INVALID
            )
            transcript.note(f"MTA-STS {domain}: policy fetch failed ({result}): {exc}")
            if live is not None:
                transcript.note(f"MTA-STS {domain}: keeping the cached policy id {live.record_id}")
                return _decision(live.policy, live.record_id)
            return StsDecision(None, record.id, str(result))
        expires = now + policy.max_age * 1000
        item = repo.CachedPolicy(domain, record.id, text, now, expires)
        async with self.db.transaction() as tx:
            await repo.save_policy(tx, item)
        transcript.note(
            f"MTA-STS {domain}: fetched policy id {record.id}, cached until {format_ms(expires)}"
        )
        return StsDecision(policy, record.id)

    async def record(
        self, domain: str, decision: StsDecision, outcomes: Sequence[TlsOutcome]
    ) -> None:
        """Count the session's TLS outcomes for the domain's daily TLS report."""
        counts = session_counts(day_of(self.clock()), domain, decision, outcomes)
        if counts:
            async with self.db.transaction() as tx:
                await repo.add_counts(tx, counts)


def session_counts(
    day: str, domain: str, decision: StsDecision, outcomes: Sequence[TlsOutcome]
) -> list[TlsCount]:
    """The counts of one session's outcomes: a policy that could not be fetched turns each
    success into that failure (the session went without its policy)."""
    kind = PolicyType.STS if decision.record_id else PolicyType.NO_POLICY_FOUND
    text = decision.policy.text if decision.policy is not None else ""
    merged: dict[tuple[TlsResult, str, str], int] = {}
    for outcome in outcomes:
        result = outcome.result
        if decision.fetch_error and result is TlsResult.SUCCESS:
            result = TlsResult(decision.fetch_error)
        key = (result, outcome.mx_host, outcome.receiving_ip)
        merged[key] = merged.get(key, 0) + 1
    return [
        TlsCount(day, domain, kind, decision.record_id, result, host, ip, sessions, text)
        for (result, host, ip), sessions in merged.items()
    ]


def _half_spent(cached: repo.CachedPolicy, now: int) -> bool:
    """Past half its life: fetched again (a failure keeps it), so that a policy in use is
    renewed well before it expires rather than at the moment an attacker may block the fetch."""
    return now - cached.fetched_at > (cached.expires_at - cached.fetched_at) // 2


def _decision(text: str, record_id: str) -> StsDecision:
    try:
        return StsDecision(parse_policy(text), record_id)
    except PolicyError:  # stored only after parsing: cannot happen unless edited by hand
        return StsDecision(None, record_id, str(TlsResult.STS_POLICY_INVALID))
