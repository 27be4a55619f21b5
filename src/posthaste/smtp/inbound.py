"""The inbound SMTP server: the MX of receiving domains and of the bounce domains (PRODUCT §10).

It takes mail from anyone, but only *for* addresses that ``services.inbound.route`` accepts:
mailboxes at a domain with receiving on and verified, and genuine VERP and unsubscribe
addresses. Every other RCPT (a forged token among them) gets ``550 5.7.1``: never an open
relay. STARTTLS is offered (not required: senders on the internet choose); there is no AUTH.
``SIZE`` (40 MiB) is advertised and enforced with 552. A message is answered 250 only once it
is stored (or its unsubscribe committed); a failure is 451 (the sender keeps it and retries).
"""

from __future__ import annotations

import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Any

from aiosmtpd.smtp import Envelope, Session

from posthaste.bootstrap import Services
from posthaste.core.inbound import MAX_INBOUND_BYTES, Arrival, Mailbox
from posthaste.services.inbound import InboundService
from posthaste.smtp.replies import INTERNAL
from posthaste.smtp.session import InFlight, Listener, MailServer, MailSession, taken_message

log = logging.getLogger(__name__)

MAX_RECIPIENTS = 100  # RFC 5321 §4.5.3.1.8: a server must take at least 100
TOO_MANY_RECIPIENTS = f"452 4.5.3 Too many recipients; at most {MAX_RECIPIENTS} per message"
RELAY_DENIED = "550 5.7.1 Relaying denied: no mailbox here by that name"


class InboundEnvelope(Envelope):
    """aiosmtpd's envelope, with where each accepted recipient goes."""

    def __init__(self) -> None:
        super().__init__()
        self.mailboxes: list[Mailbox] = []


class InboundSMTP(MailSession):
    """The mail session without AUTH, its envelopes carrying their mailboxes."""

    server = "inbound"

    def _create_envelope(self) -> InboundEnvelope:
        return InboundEnvelope()


class InboundHandler:
    """The aiosmtpd handler: routes each RCPT, stores each message before answering."""

    def __init__(self, inbound: InboundService, in_flight: InFlight) -> None:
        self.inbound = inbound
        self.in_flight = in_flight

    async def handle_EHLO(
        self, server: Any, session: Session, envelope: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        """aiosmtpd's EHLO lines, without AUTH (there is nothing to log in to here)."""
        session.host_name = hostname
        return [line for line in responses if not line[4:].startswith("AUTH")]

    async def handle_RCPT(
        self, server: Any, session: Session, envelope: InboundEnvelope, address: str, options: Any
    ) -> str:
        if len(envelope.mailboxes) >= MAX_RECIPIENTS:
            return TOO_MANY_RECIPIENTS
        try:
            mailbox = await self.inbound.route(address)
        except Exception:
            log.exception("inbound: routing a recipient failed")
            return INTERNAL.line()
        if mailbox is None:
            return RELAY_DENIED
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        envelope.mailboxes.append(mailbox)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: Any, session: Session, envelope: InboundEnvelope) -> str:
        with self.in_flight.message():
            try:
                # Only the arrival holds the message: ``receive`` lets it go once it has made
                # the message it keeps.
                stored = await self.inbound.receive(_arrival(session, envelope))
            except Exception:
                log.exception("inbound: storing a message failed")
                return INTERNAL.line()
        log.info("inbound stored %s", " ".join(stored), extra={"fields": {"stored": stored}})
        return f"250 2.0.0 OK {' '.join(stored)}".rstrip()


def _arrival(session: Session, envelope: InboundEnvelope) -> Arrival:
    peer = session.peer[0] if isinstance(session.peer, tuple) else None
    raw = taken_message(envelope)
    return Arrival(envelope.mail_from or "", envelope.mailboxes, raw, peer, session.host_name)


@dataclass
class InboundServer(MailServer):
    """The inbound listener (STARTTLS offered) on ``POSTHASTE_SMTP_INBOUND_PORT``."""

    max_message_bytes: int = MAX_INBOUND_BYTES
    name = "Inbound SMTP"

    @classmethod
    def from_settings(
        cls, services: Services, bound: dict[int, socket.socket] | None = None
    ) -> InboundServer:
        settings = services.settings
        listeners = (
            [Listener(settings.smtp_inbound_port, False)] if settings.smtp_inbound_port else []
        )
        return cls(
            services, settings.http_host, listeners, hostname=settings.mx_host, bound=bound or {}
        )

    def make_handler(self) -> InboundHandler:
        return InboundHandler(self.services.inbound, self.in_flight)

    def make_session(
        self, handler: InboundHandler, context: ssl.SSLContext, implicit: bool
    ) -> InboundSMTP:
        return InboundSMTP(
            handler,
            self.sessions,
            implicit,
            self.services.metrics,
            hostname=self.hostname,
            ident="Posthaste inbound",
            data_size_limit=self.max_message_bytes,
            enable_SMTPUTF8=True,
            tls_context=context,
            require_starttls=False,
            auth_required=False,
            auth_require_tls=True,
            auth_exclude_mechanism=["PLAIN", "LOGIN"],
        )
