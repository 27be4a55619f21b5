"""What a transport is given and what it answers: the envelope, replies and session logs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Envelope:
    mail_from: str
    recipients: Sequence[str]
    message_id: str
    smtputf8: bool = False
    # The sending domain's ``tls`` is ``enforced``: never hand this message over in clear text.
    tls_required: bool = False
    # The IP pool it leaves from (mx delivery): its stream's, else its domain's, else default.
    pool: str = "default"


@dataclass(frozen=True)
class RecipientReply:
    recipient: str
    code: int
    text: str
    # True when the reply is the final destination's (a 250 means delivered, not just relayed).
    final: bool
    provider_message_id: str | None = None
    # The destination asked us to slow down, or is suspended: try again at this time (epoch ms)
    # without counting an attempt (``services/destinations.py``).
    hold_until: int | None = None
    # Held before anything was sent: no conversation with the server took place.
    held_unsent: bool = False
    # Held by its IP pool's warm-up cap (our own limit, not a receiver's): it waits up to the
    # maximum queue age rather than the retry schedule.
    warmup_cap: bool = False
    # The destination (``core/destinations``) whose throttle or policy holds it, when held.
    destination: str | None = None


@dataclass(frozen=True)
class SessionLog:
    """One conversation with one server (or the capture store) during an attempt."""

    transport: str
    host: str | None
    recipients: Sequence[str]
    started_at: int
    duration_ms: int
    transcript: Sequence[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class DeliveryReport:
    """Every recipient's reply, and the sessions that produced them."""

    replies: list[RecipientReply]
    sessions: list[SessionLog]
