"""The status machine, walked over every (status, event) pair."""

from __future__ import annotations

import itertools

import pytest

from posthaste.core.events import EventType
from posthaste.core.status import (
    END_STATES,
    INFORMATIONAL_EVENTS,
    TRANSITIONS,
    EmailStatus,
    InvalidTransition,
    apply_event,
    event_for,
)

S = EmailStatus

# PRODUCT §4, written out independently of the table under test.
EXPECTED_MOVES = {
    (S.QUEUED, S.SENDING),
    (S.SCHEDULED, S.SENDING),
    (S.SENDING, S.SENT),
    (S.SENT, S.DELIVERED),
    (S.SENT, S.COMPLAINED),
    (S.DELIVERED, S.COMPLAINED),
    (S.SENDING, S.BOUNCED),
    (S.SENT, S.BOUNCED),
    (S.DELIVERED, S.BOUNCED),
    (S.QUEUED, S.FAILED),
    (S.SCHEDULED, S.FAILED),
    (S.SENDING, S.FAILED),
    (S.QUEUED, S.CANCELED),
    (S.SCHEDULED, S.CANCELED),
    (S.QUEUED, S.SUPPRESSED),
    (S.SCHEDULED, S.SUPPRESSED),
    # rescheduling: PATCH /emails/{id} moves between queued and scheduled
    (S.QUEUED, S.SCHEDULED),
    (S.SCHEDULED, S.QUEUED),
    (S.SCHEDULED, S.SCHEDULED),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_every_status_pair(current: EmailStatus, target: EmailStatus) -> None:
    event = f"email.{target.value}"
    if (current, target) in EXPECTED_MOVES:
        assert apply_event(current, event) is target
    else:
        with pytest.raises(InvalidTransition):
            apply_event(current, event)


@pytest.mark.parametrize(("current", "event"), list(itertools.product(S, INFORMATIONAL_EVENTS)))
def test_informational_events_keep_the_status(current: EmailStatus, event: str) -> None:
    if current in INFORMATIONAL_EVENTS[event]:
        assert apply_event(current, event) is current
    else:
        with pytest.raises(InvalidTransition):
            apply_event(current, event)


def test_end_states_are_final() -> None:
    for state in END_STATES:
        assert TRANSITIONS[state] == frozenset()


@pytest.mark.parametrize("event", ["email.unknown", "domain.created", "sent", "", "email."])
def test_unknown_events_are_refused(event: str) -> None:
    with pytest.raises(InvalidTransition):
        apply_event(S.QUEUED, event)


def test_delivery_delayed_only_while_in_flight() -> None:
    assert apply_event(S.SENDING, "email.delivery_delayed") is S.SENDING
    with pytest.raises(InvalidTransition):
        apply_event(S.QUEUED, "email.delivery_delayed")


def test_every_status_has_its_event_and_every_email_event_a_meaning() -> None:
    """The event enum and the status machine agree: each status is reached by its own event,
    and each ``email.*`` event either moves to a status or is informational."""
    assert {event_for(status) for status in S} <= set(EventType)
    email_events = {e for e in EventType if e.value.startswith("email.")}
    moving = {event_for(status) for status in S}
    received = {EventType.EMAIL_RECEIVED}  # about received mail, not a sent email's status
    assert email_events == moving | set(INFORMATIONAL_EVENTS) | received
    assert moving.isdisjoint(INFORMATIONAL_EVENTS)
