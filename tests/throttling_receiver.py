"""A loopback SMTP receiver (aiosmtpd) that throttles senders the way Gmail does.

It accepts ``per_second`` recipients in any sliding second and answers ``421 4.7.28`` to the
ones above it; a sender that collects more than ``block_after`` of those 421s within
``block_window`` seconds is blocked: every later recipient gets ``550 5.7.1`` (Gmail's answer
to a sender it has decided is abusive). It records what it accepted, what it refused and the
EHLO name of each accepted recipient's session, so a test can tell which worker sent what.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session

SLOW_DOWN = (
    "421 4.7.28 Our system has detected an unusual rate of unsolicited mail originating "
    "from your IP address. To protect our users from spam, mail sent from your IP address "
    "has been temporarily rate limited."
)
BLOCKED = "550 5.7.1 Our system has detected that this message is likely unsolicited mail."


@dataclass
class ThrottlingReceiver:
    per_second: int = 20
    block_after: int = 40
    block_window: float = 10.0
    accepted: collections.deque[float] = field(default_factory=collections.deque)
    refused: list[float] = field(default_factory=list)
    blocked: bool = False
    delivered: list[str] = field(default_factory=list)  # recipients, in order of DATA
    senders: collections.Counter[str] = field(default_factory=collections.Counter)  # EHLO names
    peak: int = 0  # the most recipients accepted within one sliding second
    # The accepted and refused times still inside their windows: each RCPT costs the same
    # however many came before, so the receiver keeps up with the sender it judges.
    _second: collections.deque[float] = field(default_factory=collections.deque)
    _recent_refusals: collections.deque[float] = field(default_factory=collections.deque)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        now = time.monotonic()
        if self.blocked:
            return BLOCKED
        window = self._second
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) >= self.per_second:
            self.refused.append(now)
            recent = self._recent_refusals
            recent.append(now)
            while recent and now - recent[0] >= self.block_window:
                recent.popleft()
            if len(recent) > self.block_after:
                self.blocked = True
            return SLOW_DOWN
        window.append(now)
        self.accepted.append(now)
        self.peak = max(self.peak, len(window))
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.delivered.extend(envelope.rcpt_tos)
        self.senders[str(session.host_name)] += len(envelope.rcpt_tos)
        return f"250 2.0.0 OK {len(self.delivered)} - gsmtp"


@asynccontextmanager
async def running_receiver(
    receiver: ThrottlingReceiver, host: str, port: int
) -> AsyncIterator[ThrottlingReceiver]:
    """Serve ``receiver`` on ``host:port`` (another loopback address beside a sink's port)."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(receiver, hostname="mx.google.test", enable_SMTPUTF8=True), host, port
    )
    try:
        yield receiver
    finally:
        server.close()
        await server.wait_closed()
