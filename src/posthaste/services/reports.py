"""What a report to a VERP address does to the email it names (PRODUCT §10).

A DSN (RFC 3464) moves each recipient it names the way an SMTP reply would have
(``core.delivery.classify_smtp_reply`` on its status code, and ``plan_outcomes`` for the events
and the email's status): ``failed`` is a bounce (Permanent for a 5.x.x status, Transient for
4.x.x; 5.1.x suppresses the address, as at SMTP time), ``delivered`` is delivered, ``delayed``
is an ``email.delivery_delayed`` event. An ARF complaint (RFC 5965) marks the email
``complained`` and suppresses the address (origin ``complaint``). Anything the status machine
does not allow (a second bounce for a bounced email) changes nothing; the report is kept all
the same.
"""

from __future__ import annotations

import logging

from posthaste.adapters.envelope import RecipientReply
from posthaste.core.delivery import Outcome, Verdict, classify_smtp_reply
from posthaste.core.events import EventType
from posthaste.core.ids import new_id
from posthaste.core.models import Email, Suppression
from posthaste.core.reports import RecipientStatus, Report, ReportKind
from posthaste.core.serialize import email_event_data
from posthaste.core.simulator import simulator_kind
from posthaste.core.status import EmailStatus, InvalidTransition
from posthaste.services.delivery_plan import plan_outcomes
from posthaste.services.suppressions import suppress
from posthaste.storage import emails as repo
from posthaste.storage.database import Tx
from posthaste.storage.emails import StatusEvent

log = logging.getLogger(__name__)

_DELAYABLE = (EmailStatus.SENDING, EmailStatus.SENT)
_COMPLAINABLE = (EmailStatus.SENT, EmailStatus.DELIVERED)
# A recipient already at this outcome is not moved there again by a repeated report.
_SETTLED = {"failed": Outcome.BOUNCED, "delivered": Outcome.DELIVERED}


async def apply_report(tx: Tx, email: Email, report: Report, now: int) -> bool:
    """Apply ``report`` to ``email`` (held for update); whether anything changed."""
    if report.kind is ReportKind.DSN:
        return await _apply_dsn(tx, email, report, now)
    if report.kind is ReportKind.COMPLAINT:
        return await _apply_complaint(tx, email, report, now)
    return False


async def _apply_dsn(tx: Tx, email: Email, report: Report, now: int) -> bool:
    known = (await repo.recipient_outcomes_many(tx, [email.id]))[email.id]
    statuses = [r for r in report.recipients if r.recipient in known]
    events = [_delayed(email, r) for r in statuses if r.action == "delayed"]
    if email.status not in _DELAYABLE:
        events = []
    moves = [
        r
        for r in statuses
        if r.action in _SETTLED and known[r.recipient] != _SETTLED[r.action].value
    ]
    replies = [_reply(r) for r in dict((r.recipient, r) for r in moves).values()]
    verdicts = {
        reply.recipient: classify_smtp_reply(
            reply.code,
            reply.text,
            final_hop=True,
            last_attempt=True,
            simulated=simulator_kind(reply.recipient) is not None,
        )
        for reply in replies
    }
    plan = plan_outcomes(email, replies, verdicts, known) if replies else None
    if plan is not None:
        events += plan.events
    if not events:
        return False
    try:
        await repo.record_events(tx, events, now)
    except InvalidTransition as exc:
        log.info("email %s: a DSN changes nothing (%s)", email.id, exc)
        return False
    if plan is not None:
        await repo.set_recipient_outcomes(tx, plan.outcomes)
        await _suppress(tx, email, verdicts, "bounce", now)
    return True


def _delayed(email: Email, status: RecipientStatus) -> StatusEvent:
    data = email_event_data(email, to=[status.recipient], delay={"diagnostic": status.diagnostic})
    return StatusEvent(email, EventType.EMAIL_DELIVERY_DELAYED, data)


def _reply(status: RecipientStatus) -> RecipientReply:
    """The DSN's verdict on one recipient, as the SMTP reply that would have said it."""
    klass = status.status[0]
    code = 250 if status.action == "delivered" else 450 if klass == "4" else 550
    if code >= 500 and klass != "5":  # "failed" with a success code: a bare permanent failure
        text = f"5.0.0 {status.diagnostic}"
    else:
        text = f"{status.status} {status.diagnostic}"
    return RecipientReply(status.recipient, code, text, True)


async def _apply_complaint(tx: Tx, email: Email, report: Report, now: int) -> bool:
    known = (await repo.recipient_outcomes_many(tx, [email.id]))[email.id]
    named = [address for address in report.complainants if address in known]
    if not named and len(known) == 1:  # the report hides the address (Outlook's JMRP does)
        named = list(known)
    changed = False
    if email.status in _COMPLAINABLE:
        to = named or list(email.to)
        data = email_event_data(email, to=to, complaint={"feedback_type": report.feedback_type})
        event = StatusEvent(email, EventType.EMAIL_COMPLAINED, data)
        await repo.record_events(tx, [event], now)
        changed = True
    verdicts = {
        address: Verdict(Outcome.DELIVERED, suppress=simulator_kind(address) is None)
        for address in named
    }
    await _suppress(tx, email, verdicts, "complaint", now)
    return changed or bool(named)


async def _suppress(
    tx: Tx, email: Email, verdicts: dict[str, Verdict], origin: str, now: int
) -> None:
    for address, verdict in verdicts.items():
        if verdict.suppress:
            item = Suppression(new_id(), email.team_id, address, origin, email.id, now)
            await suppress(tx, item)
