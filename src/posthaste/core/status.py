"""The email status machine: the one table of allowed moves, and the events that make them.

Every status change is one event of type ``email.<new status>``. A few events carry no status
change (``email.delivery_delayed``, ``email.opened``, ``email.clicked``). ``apply_event`` is the
only place that decides what an event does to a status; storage writes both together.

    queued ──┐                    ┌─> complained
             ├─> sending ─> sent ─> delivered ─┤
 scheduled ──┘      │        │          └──────┴─> bounced
   │  ▲             └────────┴───────────────────> bounced
   └──┘ (reschedule)
 queued|scheduled|sending ─> failed
 queued|scheduled ─> canceled | suppressed
"""

from __future__ import annotations

from enum import StrEnum

from posthaste.core.events import EventType


class EmailStatus(StrEnum):
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    SENDING = "sending"
    SENT = "sent"
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    FAILED = "failed"
    CANCELED = "canceled"
    SUPPRESSED = "suppressed"


S = EmailStatus

END_STATES: frozenset[EmailStatus] = frozenset(
    {S.BOUNCED, S.COMPLAINED, S.FAILED, S.CANCELED, S.SUPPRESSED}
)

TRANSITIONS: dict[EmailStatus, frozenset[EmailStatus]] = {
    S.QUEUED: frozenset({S.SCHEDULED, S.SENDING, S.FAILED, S.CANCELED, S.SUPPRESSED}),
    S.SCHEDULED: frozenset({S.SCHEDULED, S.QUEUED, S.SENDING, S.FAILED, S.CANCELED, S.SUPPRESSED}),
    S.SENDING: frozenset({S.SENT, S.BOUNCED, S.FAILED}),
    S.SENT: frozenset({S.DELIVERED, S.BOUNCED, S.COMPLAINED}),
    S.DELIVERED: frozenset({S.BOUNCED, S.COMPLAINED}),
    S.BOUNCED: frozenset(),
    S.COMPLAINED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELED: frozenset(),
    S.SUPPRESSED: frozenset(),
}

# Events recorded on an email that leave its status as it is, and the statuses they may follow.
INFORMATIONAL_EVENTS: dict[str, frozenset[EmailStatus]] = {
    EventType.EMAIL_DELIVERY_DELAYED: frozenset({S.SENDING, S.SENT}),
    EventType.EMAIL_OPENED: frozenset({S.SENT, S.DELIVERED, S.COMPLAINED}),
    EventType.EMAIL_CLICKED: frozenset({S.SENT, S.DELIVERED, S.COMPLAINED}),
}


class InvalidTransition(Exception):
    """An event that the email's current status does not allow."""

    def __init__(self, current: EmailStatus, event_type: str) -> None:
        super().__init__(f"{event_type} is not allowed from status {current.value}")
        self.current = current
        self.event_type = event_type


def can_move(current: EmailStatus, target: EmailStatus) -> bool:
    return target in TRANSITIONS[current]


def event_for(status: EmailStatus) -> EventType:
    """The event that moves an email to ``status`` (``email.<status>``)."""
    return EventType(f"email.{status.value}")


def apply_event(current: EmailStatus, event_type: str) -> EmailStatus:
    """The status after ``event_type``; raises InvalidTransition when the move is not allowed."""
    allowed_after = INFORMATIONAL_EVENTS.get(event_type)
    if allowed_after is not None:
        if current not in allowed_after:
            raise InvalidTransition(current, event_type)
        return current
    prefix, _, name = event_type.partition(".")
    try:
        target = EmailStatus(name)
    except ValueError:
        raise InvalidTransition(current, event_type) from None
    if prefix != "email" or not can_move(current, target):
        raise InvalidTransition(current, event_type)
    return target
