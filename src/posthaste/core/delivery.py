"""Pure delivery decisions: what an SMTP reply means for a recipient, and for the email."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from posthaste.core.status import EmailStatus


class Outcome(StrEnum):
    PENDING = "pending"  # not tried yet
    DEFERRED = "deferred"  # temporary failure; tried again on the retry schedule
    ACCEPTED = "accepted"  # taken by a relay (smarthost): delivered or bounced comes later
    DELIVERED = "delivered"  # taken by the recipient's own server
    BOUNCED = "bounced"  # refused for good


WAITING = frozenset({Outcome.PENDING, Outcome.DEFERRED, Outcome.ACCEPTED})


def classify_reply(code: int, final_hop: bool, last_attempt: bool) -> Outcome:
    """2xx: delivered (or accepted by a relay); 4xx or no answer (code 0): deferred, bounced
    once the retry schedule is spent; 5xx: bounced."""
    if 200 <= code < 300:
        return Outcome.DELIVERED if final_hop else Outcome.ACCEPTED
    if code >= 500:
        return Outcome.BOUNCED
    return Outcome.BOUNCED if last_attempt else Outcome.DEFERRED


def aggregate_status(current: EmailStatus, outcomes: Iterable[Outcome | str]) -> EmailStatus:
    """The email's status from its recipients' outcomes (PRODUCT §4): ``delivered`` once every
    recipient has an outcome and one was delivered, ``bounced`` when all bounced, else as is."""
    values = [Outcome(o) for o in outcomes]
    if not values or any(o in WAITING for o in values):
        return current
    if any(o is Outcome.DELIVERED for o in values):
        return EmailStatus.DELIVERED
    return EmailStatus.BOUNCED
