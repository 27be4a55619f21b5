"""Delivering one accepted email: the work behind a ``deliver_email`` job.

Three steps, so that no database lock is held while the network is used:

1. ``_start`` (one transaction): lock the email, move ``queued|scheduled → sending`` and count
   the attempt; pick the recipients still waiting for an outcome.
2. Build (or reuse) the exact message bytes and hand them to the transport; simulator
   recipients are answered locally.
3. ``_finish`` (one transaction): store the raw message on first build, record one event per
   recipient outcome, move the status, and finish the job or schedule its retry.

A worker that dies between 2 and 3 leaves the job leased; it falls due again after the lease and
the message is sent again (PRODUCT §5: the only case of a duplicate).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from posthaste.adapters.transports import (
    DeliveryReport,
    Envelope,
    RecipientReply,
    SessionLog,
    TransportRegistry,
)
from posthaste.core.addresses import parse_address
from posthaste.core.crypto import TokenSigner
from posthaste.core.delivery import (
    DeliveryAttempt,
    Outcome,
    Verdict,
    aggregate_status,
    classify_smtp_reply,
)
from posthaste.core.dkim import DkimError, DkimKey, NoSigningKeys, SigningKeys, sign_message
from posthaste.core.ids import ms_to_datetime, new_id, now_ms
from posthaste.core.mime import MimeAttachment, OutgoingMessage, build_message
from posthaste.core.models import Email, Job, KeyMode, Suppression
from posthaste.core.serialize import email_event_data
from posthaste.core.simulator import SimKind, simulated_reply, simulator_kind
from posthaste.core.status import EmailStatus
from posthaste.core.verp import verp_address
from posthaste.storage import attempts as attempts_repo
from posthaste.storage import emails as repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import Database, Tx

log = logging.getLogger(__name__)

ACTIVE = (EmailStatus.QUEUED, EmailStatus.SCHEDULED, EmailStatus.SENDING)
OFFLOAD_BUILD_BYTES = 256 * 1024  # bigger messages are built off the event loop (~20 ms/MiB)
MAX_JOB_CLAIMS = 25  # a job claimed this often without finishing is poison: the email fails
_TO_TRY = (Outcome.PENDING, Outcome.DEFERRED)


@dataclass(frozen=True)
class Attempt:
    email: Email
    number: int
    waiting: list[str]


class DeliveryService:
    def __init__(
        self,
        db: Database,
        transports: TransportRegistry,
        retry_schedule: Sequence[float],
        verp: TokenSigner,
        signing_keys: SigningKeys | None = None,
    ) -> None:
        self.db = db
        self.transports = transports
        self.retry_schedule = tuple(retry_schedule)
        self.verp = verp
        self.signing_keys: SigningKeys = signing_keys or NoSigningKeys()

    async def deliver(self, job: Job) -> None:
        attempt = await self._start(job)
        if attempt is None:
            return
        try:
            raw, built = await self._message(attempt.email)
        except DkimError as exc:
            await self._fail_unsendable(job, f"DKIM signing failed: {exc}")
            return
        report = await self._send(attempt, raw)
        await self._finish(job, attempt, report, raw if built else None)

    async def _start(self, job: Job) -> Attempt | None:
        now = now_ms()
        async with self.db.transaction() as tx:
            email = await repo.get_email_any_team(tx, job.ref, for_update=True)
            # ``sent`` too: a relay took some recipients while others were deferred.
            if email is None or email.status not in (*ACTIVE, EmailStatus.SENT):
                await jobs_repo.finish(tx, job)
                return None
            if (
                email.scheduled_at is not None
                and email.scheduled_at > now
                and email.status is EmailStatus.SCHEDULED
            ):
                await jobs_repo.retry_at(tx, job, email.scheduled_at)
                return None
            outcomes = await repo.recipient_outcomes(tx, email.id)
            waiting = sorted(a for a, o in outcomes.items() if o in _TO_TRY)
            if not waiting or job.attempts > MAX_JOB_CLAIMS:
                await self._give_up(tx, email, job, waiting, now)
                return None
            if email.status not in (EmailStatus.SENDING, EmailStatus.SENT):
                email = await _record(tx, email, "email.sending", email_event_data(email), now)
            number = email.attempts + 1
            await repo.set_delivery_fields(tx, email.id, attempts=number)
        return Attempt(replace(email, attempts=number), number, waiting)

    async def _give_up(self, tx: Tx, email: Email, job: Job, waiting: list[str], now: int) -> None:
        """Nothing left to try, or a poison job: an email not yet sent fails, else it rests."""
        if waiting and email.status is not EmailStatus.SENT:
            await self._fail(tx, email, job, "delivery kept crashing; giving up", now)
            return
        if waiting:
            log.error(
                "email %s: delivery kept crashing; %d recipients untried", email.id, len(waiting)
            )
        await jobs_repo.finish(tx, job)

    async def _fail(self, tx: Tx, email: Email, job: Job, reason: str, now: int) -> None:
        data = email_event_data(email, failed={"reason": reason})
        await repo.record_event(tx, email, "email.failed", data, now)
        await jobs_repo.finish(tx, job)

    async def _fail_unsendable(self, job: Job, reason: str) -> None:
        async with self.db.transaction() as tx:
            email = await repo.get_email_any_team(tx, job.ref, for_update=True)
            if email is not None and email.status is EmailStatus.SENDING:
                await self._fail(tx, email, job, reason, now_ms())
            else:
                await jobs_repo.finish(tx, job)

    async def _message(self, email: Email) -> tuple[bytes, bool]:
        """The exact bytes to send: stored ones on a retry, else freshly built and signed (True).

        The signed bytes are stored with the email, so a retry sends (and ``/raw`` shows)
        exactly what was sent the first time, signature included."""
        async with self.db.read() as tx:
            if email.raw_blob_id is not None:
                stored = await repo.read_blob(tx, email.team_id, email.raw_blob_id)
                if stored is not None:
                    return stored, False
            attachments = []
            for info in await repo.list_attachments(tx, email.team_id, email.id):
                content = await repo.read_blob(tx, email.team_id, info.blob_id) or b""
                attachments.append(
                    MimeAttachment(info.filename, info.content_type, content, info.content_id)
                )
        message = _outgoing(email, attachments)
        key = await self.signing_keys.signing_key(email.team_id, _sender_domain(email))
        if sum(len(a.content) for a in attachments) > OFFLOAD_BUILD_BYTES:
            return await asyncio.to_thread(_build_and_sign, message, key), True
        return _build_and_sign(message, key), True

    async def _send(self, attempt: Attempt, raw: bytes) -> DeliveryReport:
        email = attempt.email
        real = [r for r in attempt.waiting if simulator_kind(r) is None]
        simulated = _simulate([r for r in attempt.waiting if r not in real], attempt.number, email)
        if not real:
            return simulated
        transport = self.transports.for_email(email.region, email.mode is KeyMode.TEST)
        return_path = verp_address(self.verp, email.id, _sender_domain(email))
        envelope = Envelope(return_path, real, email.message_id, _needs_smtputf8(raw, real))
        sent = await transport.send(envelope, raw)
        return DeliveryReport(simulated.replies + sent.replies, simulated.sessions + sent.sessions)

    async def _finish(
        self, job: Job, attempt: Attempt, report: DeliveryReport, new_raw: bytes | None
    ) -> None:
        now = now_ms()
        replies = report.replies
        async with self.db.transaction() as tx:
            email = await repo.get_email_any_team(tx, job.ref, for_update=True)
            if email is None or email.status not in (EmailStatus.SENDING, EmailStatus.SENT):
                await jobs_repo.finish(tx, job)
                return
            if new_raw is not None:
                await repo.store_raw(tx, email, new_raw, now)
            verdicts = self._verdicts(attempt, replies)
            await attempts_repo.insert_attempts(tx, _attempt_rows(attempt, report, verdicts))
            await self._suppress(tx, email, replies, verdicts, now)
            outcomes = {recipient: v.outcome for recipient, v in verdicts.items()}
            email = await self._mark_sent(tx, email, replies, now)
            email = await self._record_outcomes(tx, email, replies, verdicts, now)
            if any(o is Outcome.DEFERRED for o in outcomes.values()):
                delay = self._retry_delay(attempt.number)
                await jobs_repo.retry_at(tx, job, now + delay)
            else:
                await jobs_repo.finish(tx, job)

    def _verdicts(self, attempt: Attempt, replies: list[RecipientReply]) -> dict[str, Verdict]:
        last_attempt = attempt.number > len(self.retry_schedule)
        return {
            r.recipient: classify_smtp_reply(
                r.code,
                r.text,
                final_hop=r.final,
                last_attempt=last_attempt,
                simulated=simulator_kind(r.recipient) is not None,
            )
            for r in replies
        }

    async def _suppress(
        self,
        tx: Tx,
        email: Email,
        replies: list[RecipientReply],
        verdicts: dict[str, Verdict],
        now: int,
    ) -> None:
        """A recipient error suppresses the address for the team (origin ``bounce``)."""
        for reply in replies:
            if verdicts[reply.recipient].suppress:
                item = Suppression(
                    new_id(), email.team_id, reply.recipient, "bounce", email.id, now
                )
                await suppressions_repo.add(tx, item)

    async def _mark_sent(
        self, tx: Tx, email: Email, replies: list[RecipientReply], now: int
    ) -> Email:
        accepted = [r for r in replies if 200 <= r.code < 300]
        if email.status is not EmailStatus.SENDING or not accepted:
            return email
        provider_id = next((r.provider_message_id for r in accepted if r.provider_message_id), None)
        await repo.set_delivery_fields(tx, email.id, provider_message_id=provider_id)
        email = replace(email, provider_message_id=provider_id)
        return await _record(tx, email, "email.sent", email_event_data(email), now)

    async def _record_outcomes(
        self,
        tx: Tx,
        email: Email,
        replies: list[RecipientReply],
        verdicts: dict[str, Verdict],
        now: int,
    ) -> Email:
        outcomes = {recipient: v.outcome for recipient, v in verdicts.items()}
        known = await repo.recipient_outcomes(tx, email.id)
        known.update(outcomes)
        for outcome in (Outcome.DEFERRED, Outcome.BOUNCED, Outcome.ACCEPTED, Outcome.DELIVERED):
            group = [r for r in replies if outcomes[r.recipient] is outcome]
            if group:
                await repo.set_recipient_outcome(
                    tx, email.id, [r.recipient for r in group], outcome.value
                )
        target = aggregate_status(email.status, list(known.values()))
        # Deferred and bounced first, delivered last: when every recipient answers in one
        # attempt, the event that completes the picture is the one naming the new status.
        ordered = sorted(replies, key=lambda r: _EVENT_ORDER[outcomes[r.recipient]])
        for index, reply in enumerate(ordered):
            last = index == len(ordered) - 1
            email = await self._record_reply(
                tx, email, reply, verdicts[reply.recipient], target if last else None, now
            )
        for reply in replies:
            complains = simulator_kind(reply.recipient) is SimKind.COMPLAINED
            if complains and outcomes[reply.recipient] is Outcome.DELIVERED:
                data = email_event_data(email, to=[reply.recipient])
                email = await _record(tx, email, "email.complained", data, now)
        return email

    async def _record_reply(
        self,
        tx: Tx,
        email: Email,
        reply: RecipientReply,
        verdict: Verdict,
        target: EmailStatus | None,
        now: int,
    ) -> Email:
        event_type, extra = _event_for(reply, verdict)
        if event_type is None:
            if target is not None and target is not email.status:
                data = email_event_data(email)
                return await _record(tx, email, f"email.{target.value}", data, now)
            return email
        data = email_event_data(email, to=[reply.recipient], **extra)
        status = target if target is not None else email.status
        return await _record(tx, email, event_type, data, now, status=status)

    def _retry_delay(self, attempt: int) -> int:
        base = self.retry_schedule[min(attempt, len(self.retry_schedule)) - 1]
        return int(base * 1000 * (1 + random.uniform(-0.1, 0.1)))


_EVENT_ORDER = {
    Outcome.DEFERRED: 0,
    Outcome.BOUNCED: 1,
    Outcome.ACCEPTED: 2,
    Outcome.DELIVERED: 3,
    Outcome.PENDING: 4,
}


def _event_for(reply: RecipientReply, verdict: Verdict) -> tuple[str | None, dict[str, Any]]:
    diagnostic = f"{reply.code} {reply.text}"
    if verdict.outcome is Outcome.DELIVERED:
        return "email.delivered", {}
    if verdict.outcome is Outcome.DEFERRED:
        return "email.delivery_delayed", {"delay": {"diagnostic": diagnostic}}
    if verdict.outcome is Outcome.BOUNCED:
        bounce = {
            "type": verdict.bounce_type,
            "subtype": verdict.bounce_subtype,
            "diagnostic": diagnostic,
        }
        return "email.bounced", {"bounce": bounce}
    return None, {}


def _simulate(recipients: list[str], attempt: int, email: Email) -> DeliveryReport:
    """The simulator's answers, logged like a session so ``/attempts`` shows them too."""
    replies: list[RecipientReply] = []
    transcript: list[dict[str, Any]] = []
    for recipient in recipients:
        kind = simulator_kind(recipient)
        assert kind is not None
        sim = simulated_reply(kind, attempt)
        replies.append(RecipientReply(recipient, sim.code, sim.text, True, email.message_id))
        transcript.append({"elapsed_ms": 0, "command": f"RCPT TO:<{recipient}>"})
        transcript.append({"elapsed_ms": 0, "reply": f"{sim.code} {sim.text}"})
    if not recipients:
        return DeliveryReport([], [])
    log = SessionLog("simulator", None, recipients, now_ms(), 0, transcript)
    return DeliveryReport(replies, [log])


def _attempt_rows(
    attempt: Attempt, report: DeliveryReport, verdicts: dict[str, Verdict]
) -> list[DeliveryAttempt]:
    by_recipient = {r.recipient: r for r in report.replies}
    rows = []
    for log in report.sessions:
        replies = [
            {
                "recipient": r,
                "code": by_recipient[r].code,
                "text": by_recipient[r].text,
                "outcome": verdicts[r].outcome.value,
            }
            for r in log.recipients
            if r in by_recipient
        ]
        rows.append(
            DeliveryAttempt(
                id=new_id(),
                team_id=attempt.email.team_id,
                email_id=attempt.email.id,
                attempt=attempt.number,
                attempted_at=log.started_at,
                transport=log.transport,
                host=log.host,
                recipients=list(log.recipients),
                replies=replies,
                transcript=list(log.transcript),
                duration_ms=log.duration_ms,
            )
        )
    return rows


async def _record(
    tx: Tx,
    email: Email,
    event_type: str,
    data: dict[str, Any],
    now: int,
    *,
    status: EmailStatus | None = None,
) -> Email:
    """``repo.record_event``, and the email as it now is (no read back)."""
    new_status, _ = await repo.record_event(tx, email, event_type, data, now, status=status)
    sent_at = now if event_type == "email.sent" else email.sent_at
    return replace(email, status=new_status, last_event=event_type, sent_at=sent_at)


def _needs_smtputf8(raw: bytes, recipients: Sequence[str]) -> bool:
    """RFC 6531: raw UTF-8 in the header block or a non-ASCII recipient needs SMTPUTF8."""
    header_block = raw.split(b"\r\n\r\n", 1)[0]
    return not header_block.isascii() or any(not r.isascii() for r in recipients)


def _sender_domain(email: Email) -> str:
    """The A-label domain of the From address: the DKIM ``d=`` and the return path's parent."""
    return parse_address(email.from_address, "from").domain.lower()


def _build_and_sign(message: OutgoingMessage, key: DkimKey | None) -> bytes:
    raw = build_message(message)
    if key is None:
        return raw
    return sign_message(raw, key, now_ms() // 1000)


def _outgoing(email: Email, attachments: list[MimeAttachment]) -> OutgoingMessage:
    return OutgoingMessage(
        from_=email.from_address,
        to=email.to,
        cc=email.cc,
        reply_to=email.reply_to,
        subject=email.subject,
        html=email.html,
        text=email.text,
        headers=email.headers,
        attachments=attachments,
        message_id=email.message_id,
        date=ms_to_datetime(email.created_at),
    )
