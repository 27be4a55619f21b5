"""Pure delivery decisions: what an SMTP reply means for a recipient, and for the email."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from posthaste.core.status import EmailStatus


class Outcome(StrEnum):
    PENDING = "pending"  # not tried yet
    DEFERRED = "deferred"  # temporary failure; tried again on the retry schedule
    ACCEPTED = "accepted"  # taken by a relay (smarthost): delivered or bounced comes later
    DELIVERED = "delivered"  # taken by the recipient's own server
    BOUNCED = "bounced"  # refused for good
    SUPPRESSED = "suppressed"  # on the team's suppression list when its turn came: never sent


WAITING = frozenset({Outcome.PENDING, Outcome.DEFERRED, Outcome.ACCEPTED})


_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})(?!\S)")
# Enhanced codes (RFC 3463) that say the address itself is bad: the mailbox or domain does not
# exist (X.1.x) or the server calls it unavailable in general (5.5.0, what Outlook answers to
# an unknown mailbox). Policy and infrastructure refusals (5.7.x spam or authentication, 5.3.x
# system, 5.4.x routing) say nothing about the address: no suppression.
_SUPPRESSING_SUBJECTS = frozenset({1})
_SUPPRESSING_CODES = frozenset({(5, 0)})
_SUBTYPES = {(1, None): "NoEmail", (2, 2): "MailboxFull", (3, 4): "MessageTooLarge"}


@dataclass(frozen=True)
class Verdict:
    """What one recipient's reply means: the outcome and, for a bounce, how to report it."""

    outcome: Outcome
    suppress: bool = False
    bounce_type: str | None = None  # "Permanent" | "Transient"
    bounce_subtype: str | None = None


def enhanced_status(text: str) -> tuple[int, int, int] | None:
    """The RFC 3463 code at the start of a reply text (``5.1.1 User unknown`` → (5, 1, 1))."""
    found = _ENHANCED.match(text)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def classify_smtp_reply(
    code: int, text: str, *, final_hop: bool, last_attempt: bool, simulated: bool = False
) -> Verdict:
    """2xx: delivered (or accepted by a relay); 4xx, timeouts, refused connections (any code
    below 500 that is not 2xx): deferred, bounced Transient once the retry schedule is spent;
    5xx: bounced Permanent, suppressed only for a recipient error (X.1.x, 5.5.0) and never for
    a simulator address. A bare 5xx without an enhanced code is not suppressed: it may as well
    be a policy refusal."""
    if 200 <= code < 300:
        return Verdict(Outcome.DELIVERED if final_hop else Outcome.ACCEPTED)
    if code < 500:
        if last_attempt:
            return Verdict(Outcome.BOUNCED, False, "Transient", "General")
        return Verdict(Outcome.DEFERRED)
    status = enhanced_status(text)
    suppress = status is not None and not simulated and _is_recipient_error(status)
    return Verdict(Outcome.BOUNCED, suppress, "Permanent", _subtype(status))


def _is_recipient_error(status: tuple[int, int, int]) -> bool:
    klass, subject, detail = status
    return klass == 5 and (
        subject in _SUPPRESSING_SUBJECTS or (subject, detail) in _SUPPRESSING_CODES
    )


def _subtype(status: tuple[int, int, int] | None) -> str:
    if status is None:
        return "General"
    _, subject, detail = status
    return _SUBTYPES.get((subject, detail)) or _SUBTYPES.get((subject, None)) or "General"


def aggregate_status(current: EmailStatus, outcomes: Iterable[Outcome | str]) -> EmailStatus:
    """The email's status from its recipients' outcomes (PRODUCT §4): ``delivered`` once every
    recipient has an outcome and one was delivered, ``bounced`` when the others bounced (a
    suppressed recipient was never sent to: it neither delivers nor bounces the email),
    ``suppressed`` when every recipient was suppressed, else as is."""
    values = [Outcome(o) for o in outcomes]
    if not values or any(o in WAITING for o in values):
        return current
    if any(o is Outcome.DELIVERED for o in values):
        return EmailStatus.DELIVERED
    if any(o is Outcome.BOUNCED for o in values):
        return EmailStatus.BOUNCED
    return EmailStatus.SUPPRESSED


@dataclass(frozen=True)
class DeliveryAttempt:
    """One SMTP session of a delivery attempt: whom it was for, what was said, what came back."""

    id: str
    team_id: str
    email_id: str
    attempt: int
    attempted_at: int
    transport: str
    host: str | None
    recipients: list[str]
    replies: list[dict[str, Any]]
    transcript: list[dict[str, Any]]
    duration_ms: int
