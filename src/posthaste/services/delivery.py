"""Delivering accepted emails: the work behind ``deliver_email`` jobs, a claimed batch at a time.

Three steps, so that no database lock is held while the network is used:

1. ``_start`` (one transaction for the batch): lock the emails, move ``queued|scheduled →
   sending`` and count the attempt; pick each email's recipients still waiting for an outcome,
   skipping those put on the suppression list since (an email whose every recipient is skipped
   becomes ``suppressed`` and is not sent).
2. Build, track (``core/tracking.py``) and DKIM-sign (or reuse) the exact message bytes
   (``services/delivery_messages.py``) and hand them to the transport, every email of the
   batch at once; simulator recipients are answered locally.
3. ``_finish`` (one transaction for the batch): store the signed message on first build, the
   attempts with their transcripts, the suppressions, one event per recipient outcome and the
   status, and finish each job or schedule its retry.

Each step writes the whole batch in a few statements (one per table), not one transaction per
email. A worker that dies between 2 and 3 leaves the jobs leased; they fall due again after the
lease and the messages are sent again (PRODUCT §5: the only case of a duplicate).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from posthaste.adapters.transports import (
    Busy,
    DeliveryReport,
    Envelope,
    RecipientReply,
    Transport,
    TransportRegistry,
)
from posthaste.core.crypto import TokenSigner
from posthaste.core.delivery import DeliveryAttempt, Outcome, Verdict, classify_smtp_reply
from posthaste.core.dkim import NoSigningKeys, SigningKeys
from posthaste.core.durations import format_duration
from posthaste.core.events import EventType
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Email, Job, KeyMode, Suppression
from posthaste.core.serialize import email_event_data
from posthaste.core.simulator import simulator_kind
from posthaste.core.status import EmailStatus
from posthaste.core.tracking import TrackingLinks
from posthaste.core.verp import verp_address
from posthaste.logs import EMAIL_ID, logged_with
from posthaste.services.delivery_messages import (
    Attempt,
    MessageMaker,
    Sources,
    Unsendable,
    read_sources,
)
from posthaste.services.delivery_plan import (
    attempt_rows,
    plan_outcomes,
    plan_suppressed,
    simulate,
)
from posthaste.services.delivery_rules import (
    HELD_PREFIX,
    DefaultPool,
    NoTlsRules,
    NoTrackingRules,
    PoolRules,
    SenderFacts,
    TlsRules,
    TrackingRules,
    held_until,
    hold_note,
    hold_reason,
    holding_reply,
    log_hold,
    noted,
    sender_domain,
)
from posthaste.services.metrics import Metrics
from posthaste.services.suppressions import suppress
from posthaste.storage import attempts as attempts_repo
from posthaste.storage import emails as repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.emails import DeliveryProgress, StatusEvent

log = logging.getLogger(__name__)

ACTIVE = (EmailStatus.QUEUED, EmailStatus.SCHEDULED, EmailStatus.SENDING)
# ``sent`` too: a relay took some recipients while others were deferred.
STARTABLE = (*ACTIVE, EmailStatus.SENT)
# A job claimed this often without finishing (holds for a busy destination aside) is poison:
# the email fails.
MAX_JOB_CLAIMS = 25
# Mail held by its IP pool's warm-up cap (our own limit) waits this long at most by default
# (``POSTHASTE_MAX_QUEUE_AGE``), as Postfix's ``maximal_queue_lifetime``: then it bounces.
MAX_QUEUE_AGE = 5 * 86_400.0
_TO_TRY = (Outcome.PENDING, Outcome.DEFERRED)


@dataclass(frozen=True)
class Sent:
    attempt: Attempt
    report: DeliveryReport
    new_raw: bytes | None  # the bytes built for this attempt, to store; None on a retry


@dataclass
class _Writes:
    """What a transaction of the batch will write, gathered first, written a table at a time."""

    events: list[StatusEvent] = field(default_factory=list)
    # The worker's bookkeeping per email, written in the same UPDATE as its status: one row
    # version per email per step.
    progress: dict[str, DeliveryProgress] = field(default_factory=dict)
    outcomes: list[tuple[str, str, str]] = field(default_factory=list)  # (email, address, outcome)
    done: list[Job] = field(default_factory=list)
    later: list[tuple[Job, int]] = field(default_factory=list)
    # Held for a throttled destination: due again then, the claim not counted; and why.
    postponed: list[tuple[Job, int]] = field(default_factory=list)
    hold_reasons: list[str] = field(default_factory=list)
    # What ``_finish`` gathers besides: attempt rows, the emails' provider ids and attempt
    # counts put back (held), and the emails sent, for the delivery time.
    attempts: list[DeliveryAttempt] = field(default_factory=list)
    provider_ids: dict[str, str] = field(default_factory=dict)
    uncounted: dict[str, int] = field(default_factory=dict)
    accepted_at: list[int] = field(default_factory=list)

    async def flush(self, tx: Tx, now: int) -> None:
        await repo.set_recipient_outcomes(tx, self.outcomes)
        await repo.record_events(tx, self.events, now, self.progress)
        await jobs_repo.finish_many(tx, self.done)
        await jobs_repo.retry_many(tx, self.later)
        await jobs_repo.postpone_many(tx, self.postponed, self.hold_reasons)


class DeliveryService:
    def __init__(
        self,
        db: Database,
        transports: TransportRegistry,
        retry_schedule: Sequence[float],
        verp: TokenSigner,
        signing_keys: SigningKeys | None = None,
        tls_rules: TlsRules | None = None,
        tracking: TrackingLinks | None = None,
        tracking_rules: TrackingRules | None = None,
        *,
        metrics: Metrics | None = None,
        pool_rules: PoolRules | None = None,
        max_queue_age: float = MAX_QUEUE_AGE,
    ) -> None:
        self.db = db
        self.pool_rules: PoolRules = pool_rules or DefaultPool()
        self.metrics = metrics or Metrics()
        self.transports = transports
        self.retry_schedule = tuple(retry_schedule)
        self._patience_ms = int(sum(self.retry_schedule) * 1000)
        # Never shorter than the retry schedule: a pool's cap is never less patient than a
        # receiver's "slow down".
        self._max_queue_ms = max(int(max_queue_age * 1000), self._patience_ms)
        self.verp = verp
        self.signing_keys: SigningKeys = signing_keys or NoSigningKeys()
        self.tls_rules: TlsRules = tls_rules or NoTlsRules()
        self._maker = MessageMaker(tracking)
        self.tracking_rules: TrackingRules = tracking_rules or NoTrackingRules()

    async def deliver(self, job: Job) -> None:
        await self.deliver_many([job])

    async def deliver_many(self, jobs: Sequence[Job]) -> None:
        """Deliver a claimed batch; two jobs of one email (never expected) run one after another."""
        first, again = _one_per_email(jobs)
        ready = await self._hold_busy(first)
        if ready:
            async with self.db.transaction() as tx:
                attempts, _ = await self._start(tx, ready)
            await self._deliver(attempts)
        if again:
            await self.deliver_many(again)

    async def start_claimed(self, tx: Tx, jobs: list[Job]) -> Callable[[], Awaitable[None]] | None:
        """Step 1 inside the claim's own transaction (``workers/runner.BatchStarter``): a batch
        costs one transaction fewer, which is most of what a lone email's batch costs when mail
        trickles in. An email another transaction has locked (being canceled or rescheduled)
        is left for ``deliver_many``, which waits for it as usual: the claim holds its jobs'
        locks, so it must never wait for an email's. Not when destinations may be busy: their
        jobs are put back before anything starts (``_hold_busy``), in a transaction of its own."""
        if self.transports.holding():
            return None
        first, again = _one_per_email(jobs)
        attempts, locked = await self._start(tx, first, skip_locked=True)
        # What step 2 reads (stored messages, attachments), read here too: a lone email's
        # batch then costs no unit of work of its own for it (a connection, BEGIN, ROLLBACK).
        sources = await read_sources(tx, attempts)
        return functools.partial(self._deliver_started, attempts, sources, locked + again)

    async def _deliver_started(
        self, attempts: list[Attempt], sources: Sources, rest: list[Job]
    ) -> None:
        await self._deliver(attempts, sources)
        if rest:
            await self.deliver_many(rest)

    async def _deliver(self, attempts: list[Attempt], sources: Sources | None = None) -> None:
        """Steps 2 and 3 for the attempts started (``sources``: what step 2 reads, if read
        already)."""
        if not attempts:
            return
        senders = SenderFacts(
            self.signing_keys, self.tls_rules, self.tracking_rules, self.pool_rules
        )
        if sources is None:
            async with self.db.read() as tx:
                sources = await read_sources(tx, attempts)
        messages = await self._maker.messages(attempts, senders, sources)
        failures = [a for a in attempts if isinstance(messages[a.email.id], Unsendable)]
        for attempt in attempts:  # one lookup per sending domain of the batch, before sending
            await senders.tls_required(attempt.email)
        sends = [
            self._send(a, message, senders)
            for a in attempts
            if not isinstance(message := messages[a.email.id], Unsendable)
        ]
        sent = list(await asyncio.gather(*sends))
        await self._finish(sent, [(a, str(messages[a.email.id])) for a in failures])

    # --- step 0 -------------------------------------------------------------------------

    async def _hold_busy(self, jobs: list[Job]) -> list[Job]:
        """Put back, neither started nor sent, the jobs whose every destination is known to be
        busy now (suspended, or its slots taken further ahead than the throttle waits), each at
        its turn for its destination: a read, a statement per busy destination and an update
        per batch, no attempt, no status change, one more hold on the job."""
        if not jobs or not self.transports.holding():
            return jobs
        async with self.db.read() as tx:
            emails = await repo.get_emails_any_team(tx, [j.ref for j in jobs])
        now = now_ms()
        waiting: dict[tuple[str, str], list[tuple[Job, Busy]]] = {}
        for job in jobs:
            email = emails.get(job.ref)
            busy = None if email is None else self._busy(email, now)
            if email is not None and busy is not None:
                waiting.setdefault((email.region, busy.destination), []).append((job, busy))
        if not waiting:
            return jobs
        held: list[tuple[Job, int]] = []
        reasons: list[str] = []
        for (region, _), items in waiting.items():
            turns = await self.transports.hold(region, items[0][1], len(items))
            for (job, busy), turn in zip(items, turns, strict=True):
                held.append((job, turn))
                reasons.append(busy.reason)
                log_hold(job.ref, turn, busy.reason, busy.destination)
        async with self.db.transaction() as tx:
            await jobs_repo.postpone_many(tx, held, reasons)
        postponed = {job.id for job, _ in held}
        return [job for job in jobs if job.id not in postponed]

    def _busy(self, email: Email, now: int) -> Busy | None:
        if email.status not in STARTABLE or now - email.created_at >= self._patience_ms:
            return None  # past its patience a hold counts as an attempt: the usual way
        if email.status is EmailStatus.SCHEDULED and (email.scheduled_at or 0) > now:
            return None
        recipients = [r for r in (*email.to, *email.cc, *email.bcc) if simulator_kind(r) is None]
        if not recipients:
            return None
        test = email.mode is KeyMode.TEST
        return self.transports.busy(email.region, test, recipients)

    # --- step 1 -------------------------------------------------------------------------

    async def _start(
        self, tx: Tx, jobs: list[Job], *, skip_locked: bool = False
    ) -> tuple[list[Attempt], list[Job]]:
        """The attempts started, and (``skip_locked``) the jobs whose email another
        transaction holds, left alone."""
        now = now_ms()
        writes, attempts = _Writes(), []
        refs = [j.ref for j in jobs]
        if skip_locked:
            emails = await repo.get_emails_any_team(tx, refs, for_update=True, skip_locked=True)
            locked = [job for job in jobs if job.ref not in emails]
            jobs = [job for job in jobs if job.ref in emails]
        else:
            emails, locked = await repo.get_emails_any_team(tx, refs, for_update=True), []
        outcomes, listed = await repo.outcomes_and_suppressions(tx, list(emails))
        for job in jobs:
            email = emails.get(job.ref)
            known = outcomes.get(job.ref, {})
            with logged_with(EMAIL_ID, job.ref):
                attempt = self._start_one(
                    writes, job, email, known, listed.get(job.ref, set()), now
                )
            if attempt is not None:
                attempts.append(attempt)
        writes.progress = {a.email.id: DeliveryProgress(attempts=a.number) for a in attempts}
        await writes.flush(tx, now)
        return attempts, locked

    def _start_one(
        self,
        writes: _Writes,
        job: Job,
        email: Email | None,
        outcomes: dict[str, str],
        listed: set[str],
        now: int,
    ) -> Attempt | None:
        if email is None or email.status not in STARTABLE:
            writes.done.append(job)
            return None
        scheduled = email.scheduled_at
        if email.status is EmailStatus.SCHEDULED and scheduled is not None and scheduled > now:
            writes.later.append((job, scheduled))
            return None
        waiting = sorted(a for a, o in outcomes.items() if o in _TO_TRY)
        if skipped := [a for a in waiting if a in listed]:
            plan = plan_suppressed(email, skipped, outcomes)
            writes.events.extend(plan.events)
            writes.outcomes.extend(plan.outcomes)
            waiting = [a for a in waiting if a not in listed]
        if not waiting or job.tries > MAX_JOB_CLAIMS:
            _give_up(writes, job, email, waiting)
            return None
        number = email.attempts + 1
        if email.status is not EmailStatus.SENDING and email.status is not EmailStatus.SENT:
            writes.events.append(
                StatusEvent(email, EventType.EMAIL_SENDING, email_event_data(email))
            )
            started = replace(
                email,
                status=EmailStatus.SENDING,
                last_event=EventType.EMAIL_SENDING,
                attempts=number,
            )
            return Attempt(job, started, number, waiting)
        return Attempt(job, replace(email, attempts=number), number, waiting)

    # --- step 2 (building and signing: ``services/delivery_messages.py``) ----------------

    async def _send(
        self, attempt: Attempt, message: tuple[bytes, bool], senders: SenderFacts
    ) -> Sent:
        with logged_with(EMAIL_ID, attempt.email.id):
            return await self._send_one(attempt, message, senders)

    async def _send_one(
        self, attempt: Attempt, message: tuple[bytes, bool], senders: SenderFacts
    ) -> Sent:
        raw, built = message
        email = attempt.email
        real = [r for r in attempt.waiting if simulator_kind(r) is None]
        simulated = simulate([r for r in attempt.waiting if r not in real], attempt.number, email)
        report = simulated
        if real:
            transport = self.transports.for_email(email.region, email.mode is KeyMode.TEST)
            return_path = verp_address(self.verp, email.id, sender_domain(email))
            tls = await senders.tls_required(email)
            smtputf8 = _needs_smtputf8(raw, real)
            pool = await senders.pool(email)
            envelope = Envelope(return_path, real, email.message_id, smtputf8, tls, pool)
            sent = await _send_isolated(transport, envelope, raw)
            report = DeliveryReport(
                simulated.replies + sent.replies, simulated.sessions + sent.sessions
            )
        return Sent(attempt, report, raw if built else None)

    # --- step 3 -------------------------------------------------------------------------

    async def _finish(self, sent: list[Sent], failures: list[tuple[Attempt, str]]) -> None:
        now = now_ms()
        writes = _Writes()
        ids = [s.attempt.email.id for s in sent] + [a.email.id for a, _ in failures]
        async with self.db.transaction() as tx:
            emails = await repo.get_emails_any_team(tx, ids, for_update=True)
            held_before = await jobs_repo.hold_reasons(
                tx, [s.attempt.job for s in sent if s.attempt.job.holds]
            )
            for attempt, reason in failures:
                _fail_unsendable(writes, attempt, emails.get(attempt.email.id), reason)
            live: list[Sent] = []
            for item in sent:
                if _still_sending(emails.get(item.attempt.email.id)):
                    live.append(item)
                else:  # finished meanwhile (canceled, failed): nothing more to record
                    writes.done.append(item.attempt.job)
            known = await repo.recipient_outcomes_many(tx, [s.attempt.email.id for s in live])
            for item in live:
                email = emails[item.attempt.email.id]
                why = held_before.get(item.attempt.job.id)
                await self._record(tx, writes, item, email, known[email.id], why, now)
            raws = [(emails[s.attempt.email.id], s.new_raw) for s in live if s.new_raw is not None]
            # The signed messages and the attempts in one statement.
            tried = [attempts_repo.inserted(writes.attempts)] if writes.attempts else []
            blob_ids = await repo.store_raws(tx, raws, now, tried)
            writes.progress = _progress(blob_ids, writes.provider_ids, writes.uncounted)
            await writes.flush(tx, now)
        for created_at in writes.accepted_at:
            self.metrics.email_sent(created_at, now)

    async def _record(
        self,
        tx: Tx,
        writes: _Writes,
        item: Sent,
        email: Email,
        known: dict[str, str],
        held_before: str | None,
        now: int,
    ) -> None:
        """One email's sessions: its attempt rows, outcomes and events, and its job finished,
        retried or held (its turn, no attempt counted)."""
        age = now - email.created_at
        replies = [self._expired(r, age) for r in item.report.replies]
        patient = {r.recipient for r in replies if self._patient(r, age)}
        verdicts = self._verdicts(item.attempt, replies, patient)
        report = _spoken(DeliveryReport(replies, item.report.sessions), patient)
        job = item.attempt.job
        if job.holds:
            report = noted(report, hold_note(job, held_before, email, now))
        writes.attempts.extend(attempt_rows(email, item.attempt.number, report, verdicts))
        await _suppress(tx, email, replies, verdicts, now)
        spoken = [r for r in replies if not (r.recipient in patient and r.held_unsent)]
        plan = plan_outcomes(email, spoken, verdicts, known)
        if any(e.event_type is EventType.EMAIL_SENT for e in plan.events):
            writes.accepted_at.append(email.created_at)
        writes.events.extend(plan.events)
        writes.outcomes.extend(plan.outcomes)
        if plan.provider_message_id is not None:
            writes.provider_ids[email.id] = plan.provider_message_id
        held = held_until(replies, verdicts, patient)
        if held is None:
            self._schedule(writes, item.attempt, plan.deferred, now)
            return
        reason = hold_reason(replies, verdicts)
        writes.postponed.append((job, held))
        writes.hold_reasons.append(reason)
        writes.uncounted[email.id] = item.attempt.number - 1
        log_hold(email.id, held, reason, holding_reply(replies, verdicts).destination)

    def _patient(self, reply: RecipientReply, age: int) -> bool:
        """Whether a reply holding its mail (a busy destination, a "slow down", a pool's cap)
        lets it wait without counting an attempt: while the email is younger than the whole
        retry schedule (a receiver that says "slow down" for ever does not keep it for ever),
        or, held by our own warm-up cap, than the maximum queue age."""
        if reply.hold_until is None or reply.code >= 500:
            return False
        return age < (self._max_queue_ms if reply.warmup_cap else self._patience_ms)

    def _expired(self, reply: RecipientReply, age: int) -> RecipientReply:
        """A reply held by a pool's cap past the maximum queue age: final, saying why."""
        if not reply.warmup_cap or reply.hold_until is None or age < self._max_queue_ms:
            return reply
        why = reply.text.removeprefix(HELD_PREFIX)
        longest = format_duration(self._max_queue_ms / 1000)
        text = (
            f"{HELD_PREFIX}queued longer than the maximum queue age ({longest}, "
            f"POSTHASTE_MAX_QUEUE_AGE) behind its IP pool's warm-up cap; {why}"
        )
        return replace(reply, text=text, hold_until=None)

    def _verdicts(
        self, attempt: Attempt, replies: list[RecipientReply], patient: set[str]
    ) -> dict[str, Verdict]:
        """Each recipient's outcome; those in ``patient`` are held without using an attempt."""
        last_attempt = attempt.number > len(self.retry_schedule)
        return {
            r.recipient: self._verdict(r, r.recipient in patient, last_attempt) for r in replies
        }

    @staticmethod
    def _verdict(reply: RecipientReply, patient: bool, last_attempt: bool) -> Verdict:
        if patient:
            return Verdict(Outcome.DEFERRED)
        if reply.warmup_cap:  # held by our cap past the maximum queue age: bounced at once
            return Verdict(Outcome.BOUNCED, False, "Transient", "General")
        return classify_smtp_reply(
            reply.code,
            reply.text,
            final_hop=reply.final,
            last_attempt=last_attempt,
            simulated=simulator_kind(reply.recipient) is not None,
        )

    def _schedule(self, writes: _Writes, attempt: Attempt, deferred: bool, now: int) -> None:
        if deferred:
            writes.later.append((attempt.job, now + self._retry_delay(attempt.number)))
        else:
            writes.done.append(attempt.job)

    def _retry_delay(self, attempt: int) -> int:
        base = self.retry_schedule[min(attempt, len(self.retry_schedule)) - 1]
        return int(base * 1000 * (1 + random.uniform(-0.1, 0.1)))


async def _send_isolated(transport: Transport, envelope: Envelope, raw: bytes) -> DeliveryReport:
    """A transport bug must not sink the rest of the batch: this email is deferred instead."""
    try:
        return await transport.send(envelope, raw)
    except Exception:
        log.exception("the %s transport failed for %s", transport.name, envelope.message_id)
        text = "4.3.0 Internal error in the transport; will retry"
        replies = [RecipientReply(r, 451, text, False) for r in envelope.recipients]
        return DeliveryReport(replies, [])


def _one_per_email(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """The first job of each email, and the others (two jobs of one email: never expected)."""
    first: dict[str, Job] = {}
    again = [job for job in jobs if first.setdefault(job.ref, job) is not job]
    return list(first.values()), again


def _give_up(writes: _Writes, job: Job, email: Email, waiting: list[str]) -> None:
    """Nothing left to try, or a poison job: an email not yet sent fails, else it rests."""
    writes.done.append(job)
    if waiting and email.status is not EmailStatus.SENT:
        data = email_event_data(email, failed={"reason": "delivery kept crashing; giving up"})
        writes.events.append(StatusEvent(email, EventType.EMAIL_FAILED, data))
    elif waiting:
        log.error("email %s: delivery kept crashing; %d recipients untried", email.id, len(waiting))


def _fail_unsendable(writes: _Writes, attempt: Attempt, email: Email | None, reason: str) -> None:
    writes.done.append(attempt.job)
    if email is not None and email.status is EmailStatus.SENDING:
        data = email_event_data(email, failed={"reason": f"building or signing failed: {reason}"})
        writes.events.append(StatusEvent(email, EventType.EMAIL_FAILED, data))


def _progress(
    blob_ids: dict[str, str], provider_ids: dict[str, str], attempts: dict[str, int]
) -> dict[str, DeliveryProgress]:
    return {
        email_id: DeliveryProgress(
            attempts=attempts.get(email_id),
            raw_blob_id=blob_ids.get(email_id),
            provider_message_id=provider_ids.get(email_id),
        )
        for email_id in blob_ids.keys() | provider_ids.keys() | attempts.keys()
    }


def _spoken(report: DeliveryReport, patient: set[str]) -> DeliveryReport:
    """The report without the sessions that held their mail unsent while it may wait: a hold
    is no attempt."""
    held = {r.recipient for r in report.replies if r.held_unsent and r.recipient in patient}
    sessions = [s for s in report.sessions if not held.issuperset(s.recipients)]
    return DeliveryReport(report.replies, sessions)


def _still_sending(email: Email | None) -> bool:
    return email is not None and email.status in (EmailStatus.SENDING, EmailStatus.SENT)


async def _suppress(
    tx: Tx,
    email: Email,
    replies: list[RecipientReply],
    verdicts: dict[str, Verdict],
    now: int,
) -> None:
    """A recipient error suppresses the address for the team (origin ``bounce``)."""
    for reply in replies:
        if verdicts[reply.recipient].suppress:
            item = Suppression(new_id(), email.team_id, reply.recipient, "bounce", email.id, now)
            await suppress(tx, item)


def _needs_smtputf8(raw: bytes, recipients: Sequence[str]) -> bool:
    """RFC 6531: raw UTF-8 in the header block or a non-ASCII recipient needs SMTPUTF8."""
    header_block = raw.split(b"\r\n\r\n", 1)[0]
    return not header_block.isascii() or any(not r.isascii() for r in recipients)
