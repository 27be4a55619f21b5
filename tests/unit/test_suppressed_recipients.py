"""Recipients found on the suppression list when delivery takes the job: what the email becomes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.delivery import Outcome, aggregate_status
from posthaste.core.models import Email
from posthaste.core.status import EmailStatus, apply_event, can_move
from posthaste.services.delivery_plan import plan_suppressed
from tests.records import email

S, Out = EmailStatus, Outcome


@pytest.mark.parametrize(
    ("current", "outcomes", "expected"),
    [
        (S.QUEUED, [Out.SUPPRESSED, Out.SUPPRESSED], S.SUPPRESSED),
        (S.QUEUED, [Out.SUPPRESSED, Out.PENDING], S.QUEUED),
        (S.SENT, [Out.DELIVERED, Out.SUPPRESSED], S.DELIVERED),
        (S.SENT, [Out.ACCEPTED, Out.SUPPRESSED], S.SENT),
        (S.SENDING, [Out.BOUNCED, Out.SUPPRESSED], S.BOUNCED),
        (S.SENDING, [Out.SUPPRESSED], S.SUPPRESSED),
        (S.SENT, [Out.DELIVERED, Out.BOUNCED], S.DELIVERED),
        (S.SENDING, [Out.BOUNCED, Out.BOUNCED], S.BOUNCED),
    ],
)
def test_a_suppressed_recipient_neither_delivers_nor_bounces(
    current: EmailStatus, outcomes: list[Outcome], expected: EmailStatus
) -> None:
    assert aggregate_status(current, outcomes) is expected


def test_an_email_whose_every_recipient_is_suppressed_gets_one_event() -> None:
    queued = email(to=["a@example.com", "b@example.com"])
    plan = plan_suppressed(queued, ["a@example.com", "b@example.com"], _pending(queued))
    [event] = plan.events
    assert (event.event_type, event.data["to"], event.status) == (
        "email.suppressed",
        ["a@example.com", "b@example.com"],
        None,  # the event's own type decides: suppressed
    )
    assert sorted(plan.outcomes) == [
        (queued.id, "a@example.com", "suppressed"),
        (queued.id, "b@example.com", "suppressed"),
    ]


def test_a_skipped_recipient_of_several_gets_its_own_event() -> None:
    queued = email(to=["a@example.com"], cc=["b@example.com"])
    plan = plan_suppressed(queued, ["b@example.com"], _pending(queued))
    [event] = plan.events
    assert (event.event_type, event.data["to"], event.status) == (
        "email.suppressed",
        ["b@example.com"],
        S.QUEUED,
    )


def _pending(item: Email) -> dict[str, str]:
    return dict.fromkeys([*item.to, *item.cc], "pending")


# Outcomes an email in each status can have when delivery takes its job again.
_BEFORE_SENDING = st.just(Out.PENDING)
_AFTER_TRY = st.sampled_from([Out.DEFERRED, Out.BOUNCED, Out.ACCEPTED, Out.DELIVERED])


@st.composite
def _startable(draw: st.DrawFn) -> tuple[EmailStatus, dict[str, str], list[str]]:
    """A status, its recipients' outcomes (one at least waiting) and the suppressed ones."""
    status = draw(st.sampled_from([S.QUEUED, S.SCHEDULED, S.SENDING, S.SENT]))
    count = draw(st.integers(1, 5))
    addresses = [f"r{i}@example.com" for i in range(count)]
    kinds = _BEFORE_SENDING if status in (S.QUEUED, S.SCHEDULED) else _AFTER_TRY
    outcomes = {a: draw(kinds).value for a in addresses}
    accepted = {Out.ACCEPTED.value, Out.DELIVERED.value}
    if status is S.SENDING:  # nothing accepted yet
        outcomes = {a: Out.DEFERRED.value if o in accepted else o for a, o in outcomes.items()}
    if status is S.SENT and not accepted & set(outcomes.values()):
        outcomes[addresses[0]] = Out.ACCEPTED.value
    waiting = [a for a, o in outcomes.items() if o in (Out.PENDING, Out.DEFERRED)]
    if not waiting:
        waiting = [addresses[-1]]
        outcomes[addresses[-1]] = Out.DEFERRED.value if status in (S.SENDING, S.SENT) else "pending"
    skipped = draw(st.lists(st.sampled_from(waiting), min_size=1, unique=True))
    return status, outcomes, sorted(skipped)


@given(_startable())
def test_every_plan_walks_the_status_machine(
    case: tuple[EmailStatus, dict[str, str], list[str]],
) -> None:
    status, outcomes, skipped = case
    item = replace(email(to=list(outcomes)), status=status)
    plan = plan_suppressed(item, skipped, outcomes)
    current = status
    for event in plan.events:  # as storage.emails.record_events checks each move
        if event.status is None:
            current = apply_event(current, event.event_type)
        else:
            assert event.status is current or can_move(current, event.status)
            current = event.status
    named = [a for e in plan.events if e.event_type == "email.suppressed" for a in e.data["to"]]
    assert sorted(named) == skipped
    assert sorted(a for _, a, _ in plan.outcomes) == skipped
    everyone = len(skipped) == len(outcomes)
    assert (current is S.SUPPRESSED) == (everyone and status in (S.QUEUED, S.SCHEDULED))
    if everyone and status is S.SENDING:
        assert current is S.FAILED
