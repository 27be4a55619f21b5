"""Simulator addresses: predictable outcomes for tests, for live and test keys alike.

``delivered@simulator.test``, ``bounced@`` (550 5.1.1), ``complained@`` (delivered, then a
complaint), ``deferred@`` (one 451, then delivered); ``+label`` is allowed (``bounced+x@``).
Simulated outcomes never touch the network and never add suppressions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

SIMULATOR_DOMAIN = "simulator.test"


class SimKind(StrEnum):
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    DEFERRED = "deferred"


@dataclass(frozen=True)
class SimReply:
    """The SMTP reply the simulator gives this recipient on this attempt."""

    code: int
    text: str


def simulator_kind(address: str) -> SimKind | None:
    """The simulator behaviour of a lookup address, or None for a real recipient."""
    local, _, domain = address.rpartition("@")
    if domain != SIMULATOR_DOMAIN:
        return None
    base = local.split("+", 1)[0]
    try:
        return SimKind(base)
    except ValueError:
        return None


def simulated_reply(kind: SimKind, attempt: int) -> SimReply:
    """``attempt`` counts from 1."""
    if kind is SimKind.BOUNCED:
        return SimReply(
            550, "5.1.1 The email account that you tried to reach does not exist (simulated)"
        )
    if kind is SimKind.DEFERRED and attempt <= 1:
        return SimReply(451, "4.3.0 Temporary failure, try again later (simulated)")
    return SimReply(250, "2.0.0 OK (simulated)")
