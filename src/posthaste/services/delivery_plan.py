"""What an attempt's replies mean for an email, worked out in memory before anything is written.

``plan_outcomes`` turns the replies of one attempt into the events to record (in order, each
with the status it leads to), the recipients' new outcomes and the provider message id, so the
worker can write a whole batch of emails in a few statements; ``plan_suppressed`` does the same
for recipients found on the suppression list when their turn comes. ``attempt_rows`` and
``simulate`` shape the attempt log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from posthaste.adapters.envelope import DeliveryReport, RecipientReply, SessionLog
from posthaste.core.delivery import DeliveryAttempt, Outcome, Verdict, aggregate_status
from posthaste.core.events import EventType
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Email
from posthaste.core.serialize import email_event_data
from posthaste.core.simulator import SimKind, simulated_reply, simulator_kind
from posthaste.core.status import EmailStatus, can_move, event_for
from posthaste.storage.emails import StatusEvent

# Deferred and bounced first, delivered last: when every recipient answers in one attempt, the
# event that completes the picture is the one naming the new status.
_EVENT_ORDER = {
    Outcome.DEFERRED: 0,
    Outcome.BOUNCED: 1,
    Outcome.ACCEPTED: 2,
    Outcome.DELIVERED: 3,
    Outcome.PENDING: 4,
}


@dataclass
class OutcomePlan:
    events: list[StatusEvent] = field(default_factory=list)
    outcomes: list[tuple[str, str, str]] = field(default_factory=list)  # (email, address, outcome)
    provider_message_id: str | None = None
    deferred: bool = False


def plan_outcomes(
    email: Email,
    replies: list[RecipientReply],
    verdicts: Mapping[str, Verdict],
    known: Mapping[str, str],
) -> OutcomePlan:
    """Events per recipient and the email's status after them (PRODUCT §4)."""
    plan = OutcomePlan()
    outcomes = {recipient: v.outcome for recipient, v in verdicts.items()}
    plan.outcomes = [(email.id, r.recipient, outcomes[r.recipient].value) for r in replies]
    plan.deferred = any(o is Outcome.DEFERRED for o in outcomes.values())
    status = email.status
    accepted = [r for r in replies if 200 <= r.code < 300]
    if status is EmailStatus.SENDING and accepted:
        ids = (r.provider_message_id for r in accepted if r.provider_message_id)
        plan.provider_message_id = next(ids, None)
        email = replace(email, provider_message_id=plan.provider_message_id)
        plan.events.append(StatusEvent(email, EventType.EMAIL_SENT, email_event_data(email)))
        status = EmailStatus.SENT
    target = aggregate_status(status, [*{**known, **outcomes}.values()])
    ordered = sorted(replies, key=lambda r: _EVENT_ORDER[outcomes[r.recipient]])
    for index, reply in enumerate(ordered):
        goal = target if index == len(ordered) - 1 else None
        status = _plan_reply(plan, email, reply, verdicts[reply.recipient], status, goal)
    for reply in replies:
        complains = simulator_kind(reply.recipient) is SimKind.COMPLAINED
        if complains and outcomes[reply.recipient] is Outcome.DELIVERED:
            data = email_event_data(email, to=[reply.recipient])
            plan.events.append(StatusEvent(email, EventType.EMAIL_COMPLAINED, data))
    return plan


def plan_suppressed(email: Email, skipped: list[str], outcomes: Mapping[str, str]) -> OutcomePlan:
    """Recipients put on the suppression list after acceptance are never sent to (PRODUCT §4).

    When every recipient of an email not yet sent is skipped, the email becomes ``suppressed``
    with one event. Otherwise one ``email.suppressed`` event per skipped recipient
    (``data.to``), the last carrying the status the recipients' outcomes now lead to; an email
    already in ``sending`` (deferred before) whose every recipient left is suppressed
    ``failed``, saying so: the status machine has no ``sending → suppressed``.
    """
    suppressed = Outcome.SUPPRESSED.value
    plan = OutcomePlan(outcomes=[(email.id, address, suppressed) for address in skipped])
    goal = aggregate_status(
        email.status, [*{**outcomes, **dict.fromkeys(skipped, suppressed)}.values()]
    )
    reached = can_move(email.status, goal)
    if goal is EmailStatus.SUPPRESSED and reached:
        plan.events.append(StatusEvent(email, EventType.EMAIL_SUPPRESSED, email_event_data(email)))
        return plan
    for index, address in enumerate(skipped):
        status = goal if reached and index == len(skipped) - 1 else email.status
        data = email_event_data(email, to=[address])
        plan.events.append(StatusEvent(email, EventType.EMAIL_SUPPRESSED, data, status))
    if goal is EmailStatus.SUPPRESSED and can_move(email.status, EmailStatus.FAILED):
        reason = "every recipient left to try is on the suppression list"
        data = email_event_data(email, failed={"reason": reason})
        plan.events.append(StatusEvent(email, EventType.EMAIL_FAILED, data))
    return plan


def _plan_reply(
    plan: OutcomePlan,
    email: Email,
    reply: RecipientReply,
    verdict: Verdict,
    status: EmailStatus,
    goal: EmailStatus | None,
) -> EmailStatus:
    event_type, extra = reply_event(reply, verdict)
    if event_type is None:
        if goal is not None and goal is not status:
            plan.events.append(StatusEvent(email, event_for(goal), email_event_data(email)))
            return goal
        return status
    data = email_event_data(email, to=[reply.recipient], **extra)
    new_status = goal if goal is not None else status
    plan.events.append(StatusEvent(email, event_type, data, new_status))
    return new_status


def reply_event(reply: RecipientReply, verdict: Verdict) -> tuple[EventType | None, dict[str, Any]]:
    diagnostic = f"{reply.code} {reply.text}"
    if verdict.outcome is Outcome.DELIVERED:
        return EventType.EMAIL_DELIVERED, {}
    if verdict.outcome is Outcome.DEFERRED:
        return EventType.EMAIL_DELIVERY_DELAYED, {"delay": {"diagnostic": diagnostic}}
    if verdict.outcome is Outcome.BOUNCED:
        bounce = {
            "type": verdict.bounce_type,
            "subtype": verdict.bounce_subtype,
            "diagnostic": diagnostic,
        }
        return EventType.EMAIL_BOUNCED, {"bounce": bounce}
    return None, {}


def simulate(recipients: list[str], attempt: int, email: Email) -> DeliveryReport:
    """The simulator's answers, logged like a session so ``/attempts`` shows them too."""
    if not recipients:
        return DeliveryReport([], [])
    replies: list[RecipientReply] = []
    transcript: list[dict[str, Any]] = []
    for recipient in recipients:
        kind = simulator_kind(recipient)
        assert kind is not None
        sim = simulated_reply(kind, attempt)
        replies.append(RecipientReply(recipient, sim.code, sim.text, True, email.message_id))
        transcript.append({"elapsed_ms": 0, "command": f"RCPT TO:<{recipient}>"})
        transcript.append({"elapsed_ms": 0, "reply": f"{sim.code} {sim.text}"})
    log = SessionLog("simulator", None, recipients, now_ms(), 0, transcript)
    return DeliveryReport(replies, [log])


def attempt_rows(
    email: Email, number: int, report: DeliveryReport, verdicts: Mapping[str, Verdict]
) -> list[DeliveryAttempt]:
    """One row per server conversation, with each recipient's reply and outcome."""
    by_recipient = {r.recipient: r for r in report.replies}
    return [
        DeliveryAttempt(
            id=new_id(),
            team_id=email.team_id,
            email_id=email.id,
            attempt=number,
            attempted_at=log.started_at,
            transport=log.transport,
            host=log.host,
            recipients=list(log.recipients),
            replies=[
                {
                    "recipient": r,
                    "code": by_recipient[r].code,
                    "text": by_recipient[r].text,
                    "outcome": verdicts[r].outcome.value,
                }
                for r in log.recipients
                if r in by_recipient
            ],
            transcript=list(log.transcript),
            duration_ms=log.duration_ms,
        )
        for log in report.sessions
    ]
