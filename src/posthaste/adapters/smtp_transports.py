"""The SMTP transports: one smarthost (``smtp://``), or each recipient domain's MX (``mx``).

Both speak through ``smtp_client`` and keep a pool of connections per destination: the host
name and port, whatever address it was dialled at, so that the concurrency cap counts per MX
host and not per A/AAAA record. A server that cannot be reached, times out or drops the line
is a temporary failure (a 4xx reply here), so the recipient is deferred and retried on the
schedule.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import ipaddress
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from posthaste.adapters.dns import DnsTemporaryFailure, MxHost, Resolver, registered_domain
from posthaste.adapters.envelope import DeliveryReport, Envelope, RecipientReply, SessionLog
from posthaste.adapters.smtp_client import (
    MAX_TRANSACTIONS,
    Caps,
    ClientOptions,
    Connection,
    ConnectionPool,
    Destination,
    SmtpUnavailable,
    TlsFailure,
    Transcript,
    deliver,
    open_connection,
)
from posthaste.config import DeliveryTarget
from posthaste.core.ids import now_ms
from posthaste.core.mta_sts import NO_POLICY, StsDecision, StsMode, allowed_hosts
from posthaste.core.tls_reports import TlsOutcome, TlsResult
from posthaste.logs import SESSION_ID, logged_with

MAX_KNOWN_DOMAINS = 10_000  # recipient domains whose destination is remembered


async def send_through(
    pool: ConnectionPool,
    options: ClientOptions,
    dest: Destination,
    envelope: Envelope,
    raw: bytes,
    transcript: Transcript,
    *,
    final: bool,
    most: int = MAX_TRANSACTIONS,
    opened: list[Connection] | None = None,
) -> list[RecipientReply]:
    """One transaction to ``dest``, on an idle pooled connection when one is still alive; a
    connection is closed once it has carried ``most`` messages. A new connection is added to
    ``opened`` (its TLS is a session for the TLS reports)."""
    key = dest.idle_key
    async with pool.slot((dest.host, dest.port)):
        conn = pool.take_idle(key)
        if conn is not None and dest.tls_required and not conn.encrypted:
            conn.client.close()  # opened for mail that did not need TLS, and it has none
            conn = None
        if conn is not None and dest.tls_required and dest.verify_tls and not conn.verified:
            conn.client.close()  # opportunistic TLS where a verified certificate is needed
            conn = None
        if conn is not None:
            transcript.note(f"reusing the connection to {dest.host}:{dest.port}")
            try:
                replies = await deliver(conn, envelope, raw, transcript, final)
            except SmtpUnavailable:
                conn.client.close()  # closed by the server while idle: dial again once
            else:
                pool.give_back(key, conn, most)
                return replies
        conn = await open_connection(dest, options, transcript)
        if opened is not None:
            opened.append(conn)
        try:
            replies = await deliver(conn, envelope, raw, transcript, final)
        except SmtpUnavailable:
            conn.client.close()
            raise
        pool.give_back(key, conn, most)
        return replies


@dataclass(frozen=True)
class Admission:
    """The throttle's answer for one session to a destination: go now (after its wait), with
    these limits, or hold the mail until ``hold_until`` (epoch ms) without sending."""

    max_connections: int
    messages_per_connection: int
    hold_until: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class Busy:
    """A destination known to take no mail now: free again from ``at`` (epoch ms), and why."""

    destination: str
    at: int
    reason: str


class Throttle(Protocol):
    """Per-destination pacing of ``mx`` delivery (``services/destinations.py``); every decision
    is noted in the transcript."""

    async def admit(
        self,
        destination: str,
        mx_hosts: Sequence[str],
        transcript: Transcript,
        message_id: str = "",
    ) -> Admission: ...

    async def observe(
        self,
        destination: str,
        replies: Sequence[RecipientReply],
        failed: SmtpUnavailable | None,
        transcript: Transcript,
    ) -> int | None:
        """Learn from a session's replies (or its failure to connect); the time to hold the
        deferred mail until when the destination asked to slow down, else None."""
        ...

    def holding(self) -> bool:
        """Whether some destination is known to be busy now (suspended, or its slots taken
        beyond the wait allowed): only then is ``busy`` worth asking."""
        ...

    def busy(self, destination: str) -> Busy | None:
        """Whether this process knows without a statement that mail to ``destination`` cannot
        go now; else None (ask ``admit``)."""
        ...

    async def hold(self, destination: str, earliest: int, count: int) -> list[int]:
        """The turns (epoch ms) of ``count`` mails held for ``destination``, from ``earliest``."""
        ...


class Unthrottled:
    """No pacing: each MX host's connection cap only."""

    async def admit(
        self,
        destination: str,
        mx_hosts: Sequence[str],
        transcript: Transcript,
        message_id: str = "",
    ) -> Admission:
        return Admission(max_connections=1_000_000, messages_per_connection=MAX_TRANSACTIONS)

    async def observe(
        self,
        destination: str,
        replies: Sequence[RecipientReply],
        failed: SmtpUnavailable | None,
        transcript: Transcript,
    ) -> int | None:
        return None

    def holding(self) -> bool:
        return False

    def busy(self, destination: str) -> Busy | None:
        return None

    async def hold(self, destination: str, earliest: int, count: int) -> list[int]:
        return [earliest] * count


@dataclass(frozen=True)
class Source:
    """Where a message leaves from (``services/pools.py``): a source address to bind and its
    HELO name (None for either: the machine's own), or held until ``hold_until`` (epoch ms)
    when every address of its pool has used up its warm-up cap for the day."""

    address: str | None = None
    helo: str | None = None
    hold_until: int | None = None
    reason: str = ""


class SourcePicker(Protocol):
    """An address of the message's IP pool; every choice is noted in the transcript."""

    async def pick(self, pool: str, transcript: Transcript) -> Source: ...


class MachineAddress:
    """No pools: every message leaves from the machine's own address."""

    async def pick(self, pool: str, transcript: Transcript) -> Source:
        return Source()


class TlsPolicies(Protocol):
    """Each recipient domain's MTA-STS policy, and the record of how its TLS sessions went
    (``services/mta_sts.py``); every decision is noted in the transcript."""

    async def policy_for(self, domain: str, transcript: Transcript) -> StsDecision: ...

    async def record(
        self, domain: str, decision: StsDecision, outcomes: Sequence[TlsOutcome]
    ) -> None: ...


class NoTlsPolicies:
    """Opportunistic TLS everywhere, nothing recorded."""

    async def policy_for(self, domain: str, transcript: Transcript) -> StsDecision:
        return NO_POLICY

    async def record(
        self, domain: str, decision: StsDecision, outcomes: Sequence[TlsOutcome]
    ) -> None:
        return None


def _everyone(recipients: Sequence[str], code: int, text: str, final: bool) -> list[RecipientReply]:
    return [RecipientReply(r, code, text, final) for r in recipients]


class SmarthostTransport:
    """Every message to one relay; its 250 means accepted for delivery (status ``sent``)."""

    name = "smtp"

    def __init__(
        self, target: DeliveryTarget, options: ClientOptions, pool: ConnectionPool
    ) -> None:
        assert target.host is not None and target.port is not None
        self.destination = Destination(
            target.host,
            target.port,
            target.tls,
            username=target.username,
            password=target.password,
        )
        self.options = options
        self.pool = pool

    async def send(self, envelope: Envelope, raw: bytes) -> DeliveryReport:
        transcript, started = Transcript(), now_ms()
        dest = self.destination
        try:
            with logged_with(SESSION_ID, transcript.session_id):
                replies = await send_through(
                    self.pool, self.options, dest, envelope, raw, transcript, final=False
                )
        except SmtpUnavailable as exc:
            replies = _everyone(envelope.recipients, exc.code, exc.text, False)
        log = SessionLog(
            self.name,
            f"{dest.host}:{dest.port}",
            list(envelope.recipients),
            started,
            transcript.elapsed_ms(),
            transcript.lines,
        )
        return DeliveryReport(replies, [log])


class MxTransport:
    """Straight to each recipient domain's MX hosts; their 250 means delivered."""

    name = "mx"

    def __init__(
        self,
        resolver: Resolver,
        options: ClientOptions,
        pool: ConnectionPool,
        port: int = 25,
        *,
        rng: random.Random | None = None,
        throttle: Throttle | None = None,
        sources: SourcePicker | None = None,
    ) -> None:
        self.resolver = resolver
        self.options = options
        self.pool = pool
        self.port = port
        self.rng = rng or random.Random()
        self.throttle: Throttle = throttle or Unthrottled()
        self.sources: SourcePicker = sources or MachineAddress()
        self.tls_policies: TlsPolicies = NoTlsPolicies()
        # Connections open at once per destination (the policy's ``max_connections``, as the
        # last admission said: remembered for as many destinations as ``_destinations``).
        self._caps: Caps[str] = Caps()
        self._limits: dict[str, int] = {}
        # Recipient domain → destination, as last routed: lets busy destinations' mail be held
        # before it is started (``held_until``); a stale entry only misplaces such a hold.
        self._destinations: dict[str, str] = {}

    def holding(self) -> bool:
        return self.throttle.holding()

    def busy(self, recipients: Sequence[str]) -> Busy | None:
        """When every destination of ``recipients`` is known to be busy now, the one free
        soonest: the mail is held for it without a lookup, a session or an attempt; else None
        (send it)."""
        found: list[Busy] = []
        for domain in {r.rpartition("@")[2].lower() for r in recipients}:
            destination = self._destinations.get(domain)
            busy = None if destination is None else self.throttle.busy(destination)
            if busy is None:
                return None
            found.append(busy)
        return min(found, key=lambda b: b.at, default=None)

    async def hold(self, busy: Busy, count: int) -> list[int]:
        """The turns of ``count`` mails held for ``busy``'s destination."""
        return await self.throttle.hold(busy.destination, busy.at, count)

    async def send(self, envelope: Envelope, raw: bytes) -> DeliveryReport:
        by_domain: dict[str, list[str]] = {}
        for recipient in envelope.recipients:
            by_domain.setdefault(recipient.rpartition("@")[2].lower(), []).append(recipient)
        results = await asyncio.gather(
            *(self._send_domain(d, rs, envelope, raw) for d, rs in by_domain.items())
        )
        replies = [reply for domain_replies, _ in results for reply in domain_replies]
        return DeliveryReport(replies, [log for _, log in results])

    async def _send_domain(
        self, domain: str, recipients: list[str], envelope: Envelope, raw: bytes
    ) -> tuple[list[RecipientReply], SessionLog]:
        transcript, started = Transcript(), now_ms()
        part = Envelope(
            envelope.mail_from,
            recipients,
            envelope.message_id,
            envelope.smtputf8,
            envelope.tls_required,
            envelope.pool,
        )
        host: str | None = None
        try:
            with logged_with(SESSION_ID, transcript.session_id):
                destination, hosts = await self._route(domain, transcript)
                if len(self._destinations) >= MAX_KNOWN_DOMAINS:
                    self._destinations.clear()
                self._destinations[domain] = destination
                replies, host = await self._secured(
                    domain, destination, hosts, part, raw, transcript
                )
        except SmtpUnavailable as exc:
            replies = _everyone(recipients, exc.code, exc.text, True)
        log = SessionLog(
            self.name, host, recipients, started, transcript.elapsed_ms(), transcript.lines
        )
        return replies, log

    async def _secured(
        self,
        domain: str,
        destination: str,
        hosts: list[str],
        envelope: Envelope,
        raw: bytes,
        transcript: Transcript,
    ) -> tuple[list[RecipientReply], str | None]:
        """The session under the domain's MTA-STS policy: with ``enforce``, only to the MX
        hosts it names and over verified TLS; the TLS outcomes are recorded for the reports."""
        decision = await self.tls_policies.policy_for(domain, transcript)
        if decision.hold_until is not None:  # its first policy is being fetched
            reason = f"MTA-STS policy of {domain}"
            return _held(envelope, decision.hold_until, reason, destination), None
        outcomes: list[TlsOutcome] = []
        try:
            hosts = _policy_hosts(domain, decision, hosts, transcript, outcomes)
            return await self._paced(
                destination, hosts, envelope, raw, transcript, decision, outcomes
            )
        finally:
            await self.tls_policies.record(domain, decision, outcomes)

    async def _paced(
        self,
        destination: str,
        hosts: list[str],
        envelope: Envelope,
        raw: bytes,
        transcript: Transcript,
        decision: StsDecision = NO_POLICY,
        outcomes: list[TlsOutcome] | None = None,
    ) -> tuple[list[RecipientReply], str | None]:
        """The session, when the destination's throttle lets it go; held mail is not sent.

        The connection cap is taken before the throttle's slot (once the destination's cap is
        known, after its first admission): a session that took its slot and then queued for a
        connection would go when one frees, with the others queued behind it, a burst at the
        receiver however evenly the slots were spaced."""
        limit = self._limits.get(destination)
        if limit is None:
            return await self._admitted(
                destination, hosts, envelope, raw, transcript, decision, outcomes, False
            )
        async with self._caps.hold(destination, limit):
            return await self._admitted(
                destination, hosts, envelope, raw, transcript, decision, outcomes, True
            )

    async def _admitted(
        self,
        destination: str,
        hosts: list[str],
        envelope: Envelope,
        raw: bytes,
        transcript: Transcript,
        decision: StsDecision,
        outcomes: list[TlsOutcome] | None,
        capped: bool,
    ) -> tuple[list[RecipientReply], str | None]:
        """``_paced`` with the connection cap held (``capped``), or not yet known."""
        admission = await self.throttle.admit(destination, hosts, transcript, envelope.message_id)
        if admission.hold_until is not None:
            return _held(envelope, admission.hold_until, admission.reason, destination), None
        source = await self.sources.pick(envelope.pool, transcript)
        if source.hold_until is not None:
            held = _held(envelope, source.hold_until, source.reason, destination, warmup=True)
            return held, None
        most = admission.messages_per_connection
        if len(self._limits) >= MAX_KNOWN_DOMAINS and destination not in self._limits:
            self._limits.clear()
        self._limits[destination] = admission.max_connections
        try:
            if not capped:  # the destination's first sessions: its cap is known from now on
                async with self._caps.hold(destination, admission.max_connections):
                    replies, host = await self._try_hosts(
                        hosts, envelope, raw, transcript, most, decision, outcomes, source
                    )
            else:
                replies, host = await self._try_hosts(
                    hosts, envelope, raw, transcript, most, decision, outcomes, source
                )
        except TlsFailure:
            raise  # our own policy's refusal: nothing for the throttle to learn
        except SmtpUnavailable as exc:
            until = await self.throttle.observe(destination, [], exc, transcript)
            if until is None:
                raise
            failed = _everyone(envelope.recipients, exc.code, exc.text, True)
            return [
                dataclasses.replace(r, hold_until=until, destination=destination) for r in failed
            ], None
        until = await self.throttle.observe(destination, replies, None, transcript)
        if until is not None:
            replies = [
                dataclasses.replace(r, hold_until=until, destination=destination)
                if 400 <= r.code < 500
                else r
                for r in replies
            ]
        return replies, host

    async def _route(self, domain: str, transcript: Transcript) -> tuple[str, list[str]]:
        """The destination (the registered domain of the best MX host) and the hosts to try,
        best first: MX by preference, else the domain itself (RFC 5321)."""
        try:
            records = await self.resolver.mx(domain)
        except DnsTemporaryFailure as exc:
            transcript.note(str(exc))
            raise SmtpUnavailable(451, f"4.4.3 DNS lookup of {domain} failed") from exc
        if records is None:
            transcript.note(f"MX {domain}: the domain does not exist")
            raise SmtpUnavailable(550, f"5.1.2 The recipient domain {domain} does not exist")
        if any(record.host == "" for record in records):
            transcript.note(f"MX {domain}: null MX, the domain accepts no mail")
            raise SmtpUnavailable(556, f"5.1.10 The recipient domain {domain} accepts no mail")
        shown = ", ".join(f"{r.preference} {r.host}" for r in records) or "none, using A/AAAA"
        transcript.note(f"MX {domain}: {shown}")
        primary = min(records).host if records else domain
        return registered_domain(primary), by_preference(records, self.rng) or [domain]

    async def _try_hosts(
        self,
        hosts: list[str],
        envelope: Envelope,
        raw: bytes,
        transcript: Transcript,
        most: int = MAX_TRANSACTIONS,
        decision: StsDecision = NO_POLICY,
        outcomes: list[TlsOutcome] | None = None,
        source: Source = Source(),
    ) -> tuple[list[RecipientReply], str]:
        last = SmtpUnavailable(451, "4.4.4 No address found for the recipient's mail servers")
        for host in hosts:
            for address in await self._addresses(host, transcript):
                if not _reachable_from(source.address, address):
                    transcript.note(f"{host} at {address}: not reachable from {source.address}")
                    continue
                try:
                    replies = await self._try_address(
                        host, address, envelope, raw, transcript, most, decision, outcomes, source
                    )
                except SmtpUnavailable as exc:
                    last = exc
                    continue
                return replies, host
        if isinstance(last, TlsFailure):
            raise last  # MTA-STS enforce: deferred, never sent without verified TLS
        # Every host failed before the transaction: always worth another try later.
        code = last.code if 400 <= last.code < 500 else 451
        raise SmtpUnavailable(code, last.text)

    async def _try_address(
        self,
        host: str,
        address: str,
        envelope: Envelope,
        raw: bytes,
        transcript: Transcript,
        most: int,
        decision: StsDecision,
        outcomes: list[TlsOutcome] | None,
        source: Source = Source(),
    ) -> list[RecipientReply]:
        """One MX address: verified TLS first when the policy is ``enforce`` or ``testing``;
        under ``testing`` a TLS failure is noted and the mail goes as it would without."""
        plain = Destination(
            host,
            self.port,
            "starttls",
            address=address,
            tls_required=envelope.tls_required,
            verify_tls=False,
            source_address=source.address,
            helo=source.helo,
        )
        verified = dataclasses.replace(plain, tls_required=True, verify_tls=True)
        mode = decision.mode
        if mode is StsMode.TESTING and not decision.allows(host):
            _outcome(outcomes, TlsResult.VALIDATION_FAILURE, host, address, source.address)
            return await send_through(
                self.pool, self.options, plain, envelope, raw, transcript, final=True, most=most
            )
        dest = verified if mode in (StsMode.ENFORCE, StsMode.TESTING) else plain
        opened: list[Connection] = []
        send = functools.partial(
            send_through,
            self.pool,
            self.options,
            envelope=envelope,
            raw=raw,
            transcript=transcript,
            final=True,
            most=most,
            opened=opened,
        )
        try:
            replies = await send(dest=dest)
        except TlsFailure as exc:
            _outcome(outcomes, exc.result, host, address, exc.local_address or source.address)
            if mode is not StsMode.TESTING:
                if mode is StsMode.ENFORCE:
                    transcript.note(f"MTA-STS enforce: {host} refused, TLS not verified")
                raise
            transcript.note(f"MTA-STS testing: {host} would be refused; sending as without it")
            # The failure is this session's outcome; the fallback is not another one.
            return await send(dest=plain, opened=None)
        for conn in opened:
            secure = conn.verified if conn.destination.verify_tls else conn.secured
            result = TlsResult.SUCCESS if secure else TlsResult.STARTTLS_NOT_SUPPORTED
            _outcome(outcomes, result, host, address, conn.local_address)
            if mode is StsMode.ENFORCE:
                transcript.note(f"MTA-STS enforce: {host} over verified TLS")
        return replies

    async def _addresses(self, host: str, transcript: Transcript) -> list[str]:
        try:
            found = await self.resolver.addresses(host)
        except DnsTemporaryFailure as exc:
            transcript.note(str(exc))
            return []
        if not found:
            transcript.note(f"{host} has no A/AAAA record")
        return found


def _reachable_from(source: str | None, address: str) -> bool:
    """An IPv4 source address reaches IPv4 servers only, an IPv6 one IPv6 servers."""
    if source is None:
        return True
    try:
        return ipaddress.ip_address(source).version == ipaddress.ip_address(address).version
    except ValueError:
        return True  # not an address literal: let the connection decide


def _held(
    envelope: Envelope, until: int, reason: str, destination: str, *, warmup: bool = False
) -> list[RecipientReply]:
    """Every recipient held unsent until ``until``: no attempt counted (the job postponed).
    ``warmup``: held by its pool's warm-up cap, our own limit rather than a receiver's."""
    text = f"4.7.0 Held by Posthaste: {reason}"
    return [
        RecipientReply(
            r,
            451,
            text,
            True,
            hold_until=until,
            held_unsent=True,
            warmup_cap=warmup,
            destination=destination,
        )
        for r in envelope.recipients
    ]


def _outcome(
    outcomes: list[TlsOutcome] | None,
    result: TlsResult,
    host: str,
    address: str,
    sending: str | None = None,
) -> None:
    if outcomes is not None:
        outcomes.append(TlsOutcome(result, host, address, sending or ""))


def _policy_hosts(
    domain: str,
    decision: StsDecision,
    hosts: list[str],
    transcript: Transcript,
    outcomes: list[TlsOutcome],
) -> list[str]:
    """The MX hosts mail may go to under the domain's policy: with ``enforce``, those its
    ``mx`` lines match (none: deferred); with ``testing``, all, noting those that do not."""
    policy = decision.policy
    if policy is None or policy.mode is StsMode.NONE:
        return hosts
    allowed = allowed_hosts(policy, hosts)
    others = [host for host in hosts if host not in allowed]
    if others:
        names = ", ".join(others)
        transcript.note(f"MTA-STS {policy.mode}: {names} not in the policy's mx")
    if policy.mode is StsMode.TESTING:
        return hosts  # those not in the policy are counted as failures when tried
    if allowed:
        return allowed
    outcomes.extend(TlsOutcome(TlsResult.VALIDATION_FAILURE, h) for h in others)
    patterns = ", ".join(policy.mx)
    raise TlsFailure(
        451,
        f"4.7.5 MTA-STS policy of {domain} (enforce, mx {patterns}) matches none of its MX hosts",
        TlsResult.VALIDATION_FAILURE,
    )


def by_preference(records: Sequence[MxHost], rng: random.Random) -> list[str]:
    """MX hosts best preference first, those of equal preference in random order: RFC 5321
    §5.1 asks senders to spread their load among them."""
    groups: dict[int, list[str]] = {}
    for record in records:
        groups.setdefault(record.preference, []).append(record.host)
    hosts: list[str] = []
    for preference in sorted(groups):
        group = groups[preference]
        rng.shuffle(group)
        hosts.extend(group)
    return hosts
