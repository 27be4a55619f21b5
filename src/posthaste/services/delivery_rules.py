"""What delivery asks of a sending domain (its ``tls`` rule, its tracking, its IP pool), as
protocols with the domain-backed and the "nothing configured" answers, each looked up once a
batch (``SenderFacts``); and how held mail is explained: the note that opens the next real
attempt's transcript, and the log line per hold."""

from __future__ import annotations

import functools
import logging
from typing import Any, Protocol

from posthaste.adapters.transports import DeliveryReport, RecipientReply, SessionLog
from posthaste.core.addresses import parse_address
from posthaste.core.delivery import Outcome, Verdict
from posthaste.core.dkim import DkimKey, SigningKeys
from posthaste.core.domains import tracking_host
from posthaste.core.ids import ms_to_datetime
from posthaste.core.models import Email, Job
from posthaste.core.pools import DEFAULT as DEFAULT_POOL
from posthaste.core.tracking import UNTRACKED, TrackingOptions

log = logging.getLogger("posthaste.services.delivery")

HELD_PREFIX = "4.7.0 Held by Posthaste: "


class TlsRules(Protocol):
    """Whether mail from a team's domain must never travel in clear text (``tls: enforced``)."""

    async def tls_required(self, team_id: str, domain: str) -> bool: ...


class SendingDomains(Protocol):
    async def sending_domain(self, team_id: str, name: str) -> Any: ...


class TrackingRules(Protocol):
    """The open and click tracking of a team's sending domain (off for an unknown domain)."""

    async def tracking_of(self, team_id: str, domain: str) -> TrackingOptions: ...


class NoTlsRules:
    async def tls_required(self, team_id: str, domain: str) -> bool:
        return False


class DomainTlsRules:
    """The sending domain's ``tls`` setting (PRODUCT §7): ``enforced`` requires STARTTLS."""

    def __init__(self, domains: SendingDomains) -> None:
        self.domains = domains

    async def tls_required(self, team_id: str, domain: str) -> bool:
        found = await self.domains.sending_domain(team_id, domain)
        return found is not None and getattr(found, "tls", None) == "enforced"


class DomainTrackingRules:
    """The sending domain's ``open_tracking`` and ``click_tracking`` settings."""

    def __init__(self, domains: SendingDomains) -> None:
        self.domains = domains

    async def tracking_of(self, team_id: str, domain: str) -> TrackingOptions:
        found = await self.domains.sending_domain(team_id, domain)
        if found is None:
            return UNTRACKED
        return TrackingOptions(
            bool(found.open_tracking), bool(found.click_tracking), tracking_host(found)
        )


class NoTrackingRules:
    async def tracking_of(self, team_id: str, domain: str) -> TrackingOptions:
        return UNTRACKED


class PoolRules(Protocol):
    """The IP pool an email leaves from (``services/pools.StreamDomainPools``)."""

    async def pool_of(self, team_id: str, stream_id: str, domain: str) -> str: ...


class DefaultPool:
    """No pools configured: every email leaves from the default pool, nothing looked up."""

    async def pool_of(self, team_id: str, stream_id: str, domain: str) -> str:
        return DEFAULT_POOL


def held_until(
    replies: list[RecipientReply], verdicts: dict[str, Verdict], patient: set[str]
) -> int | None:
    """When every recipient still deferred waits (patiently) for a throttled destination or a
    pool's cap, the earliest time one may go; None when another deferral takes the retry
    schedule."""
    deferred = [r for r in replies if verdicts[r.recipient].outcome is Outcome.DEFERRED]
    if not deferred or any(r.recipient not in patient for r in deferred):
        return None
    return min(r.hold_until for r in deferred if r.hold_until is not None)


def holding_reply(replies: list[RecipientReply], verdicts: dict[str, Verdict]) -> RecipientReply:
    """The deferred reply that holds the mail: the one with the earliest time to go."""
    deferred = [r for r in replies if verdicts[r.recipient].outcome is Outcome.DEFERRED]
    return min(deferred, key=lambda r: r.hold_until or 0)


def hold_reason(replies: list[RecipientReply], verdicts: dict[str, Verdict]) -> str:
    """Why the mail is held: ours (a busy destination, a pool's cap), or the receiver's
    "slow down" that made its destination busy."""
    reply = holding_reply(replies, verdicts)
    if reply.held_unsent:
        return reply.text.removeprefix(HELD_PREFIX)
    return f"the receiver answered {reply.code} {reply.text}"


def hold_note(job: Job, reason: str | None, email: Email, now: int) -> str:
    """The first line of an attempt's transcript after holds: how many, since when, why."""
    times = "once" if job.holds == 1 else f"{job.holds} times"
    queued = ms_to_datetime(email.created_at).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    waited = for_people(now - email.created_at)
    last = f"; the last time: {reason}" if reason else ""
    return (
        f"held {times} without using up an attempt since it was queued at {queued} "
        f"({waited} ago){last}"
    )


def for_people(ms: int) -> str:
    """A wait as people read it: ``41.3 s``, ``12 min 5 s``, ``3 h 20 min``, ``2 d 4 h``."""
    seconds = max(ms, 0) / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86_400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86_400} d {whole % 86_400 // 3600} h"


def noted(report: DeliveryReport, note: str) -> DeliveryReport:
    """``report`` with ``note`` first in each session's transcript."""
    line = {"elapsed_ms": 0, "note": note}
    sessions = [
        SessionLog(
            s.transport, s.host, s.recipients, s.started_at, s.duration_ms, [line, *s.transcript]
        )
        for s in report.sessions
    ]
    return DeliveryReport(report.replies, sessions)


def log_hold(email_id: str, until: int, reason: str, destination: str | None) -> None:
    """One line per hold, at debug: a hold writes no attempt (it must stay cheap: a busy
    destination holds thousands a minute), so this line is where each one can be seen."""
    if log.isEnabledFor(logging.DEBUG):
        at = ms_to_datetime(until).strftime("%H:%M:%S.%f")[:-3] + "Z"
        where = destination or "?"
        log.debug("email %s held until %s for %s: %s", email_id, at, where, reason)


class SenderFacts:
    """Signing keys, TLS rules, tracking and IP pools of a batch's senders, each looked up once."""

    def __init__(
        self, keys: SigningKeys, tls_rules: TlsRules, tracking: TrackingRules, pools: PoolRules
    ) -> None:
        self._keys_source, self._tls_source, self._tracking_source = keys, tls_rules, tracking
        self._pool_source = pools
        self._pools: dict[tuple[str, str, str], str] = {}
        self._keys: dict[tuple[str, str], DkimKey | None] = {}
        self._tls: dict[tuple[str, str], bool] = {}
        self._tracking: dict[tuple[str, str], TrackingOptions] = {}

    async def signing_key(self, email: Email) -> DkimKey | None:
        sender = (email.team_id, sender_domain(email))
        if sender not in self._keys:
            self._keys[sender] = await self._keys_source.signing_key(*sender)
        return self._keys[sender]

    async def tls_required(self, email: Email) -> bool:
        sender = (email.team_id, sender_domain(email))
        if sender not in self._tls:
            self._tls[sender] = await self._tls_source.tls_required(*sender)
        return self._tls[sender]

    async def tracking(self, email: Email) -> TrackingOptions:
        sender = (email.team_id, sender_domain(email))
        if sender not in self._tracking:
            self._tracking[sender] = await self._tracking_source.tracking_of(*sender)
        return self._tracking[sender]

    async def pool(self, email: Email) -> str:
        key = (email.team_id, email.stream_id, sender_domain(email))
        if key not in self._pools:
            self._pools[key] = await self._pool_source.pool_of(*key)
        return self._pools[key]


def sender_domain(email: Email) -> str:
    """The A-label domain of the From address: the DKIM ``d=`` and the return path's parent."""
    return _domain_of(email.from_address)


@functools.lru_cache(maxsize=4096)
def _domain_of(from_address: str) -> str:
    # A team sends from a handful of addresses; parsing one costs ~0.5 ms (IDNA checks).
    return parse_address(from_address, "from").domain.lower()
