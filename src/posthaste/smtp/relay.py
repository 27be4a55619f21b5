"""The SMTP relay: message submission with STARTTLS and with implicit TLS (PRODUCT §12).

A client authenticates once per connection (AUTH PLAIN or LOGIN, only over TLS; user
``posthaste``, password an API key), then submits any number of messages. Each message goes
through the rate limit and then the one send path, ``services.sending.accept()`` (whose group
commit writes the messages of concurrent connections together). The submitted MIME is kept as
the email's raw message.
The DATA reply is ``250 OK`` and the email's id (``250 OK 01a2…``); every error is answered from
``smtp.replies``.
Nothing is delivered inside the session: workers do that after commit.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from posthaste.bootstrap import Services
from posthaste.core.idempotency import idempotency_key
from posthaste.core.models import Origin, Principal
from posthaste.core.send_request import MAX_RECIPIENTS
from posthaste.core.submission import Submission, parse_submission
from posthaste.errors import InvalidApiKey, PosthasteError
from posthaste.services.metrics import Metrics
from posthaste.smtp.replies import reply_line
from posthaste.smtp.session import (
    SHARE_PORTS,
    InFlight,
    Listener,
    MailServer,
    MailSession,
    taken_message,
)

__all__ = ["SHARE_PORTS", "Listener", "RelaySMTP", "RelayServer"]

log = logging.getLogger(__name__)

USERNAME = "posthaste"
MAX_MESSAGE_BYTES = 25 * 1024 * 1024  # the API's request limit (PRODUCT §3), advertised as SIZE
OFFLOAD_PARSE_BYTES = 256 * 1024  # bigger messages are parsed off the event loop
TOO_MANY_RECIPIENTS = f"452 4.5.3 Too many recipients; at most {MAX_RECIPIENTS} per message"
AUTH_UNAVAILABLE = "454 4.7.0 Temporary authentication failure; retry later"


class RelaySMTP(MailSession):
    """The mail session with API-key AUTH (PLAIN and LOGIN; ``RelayHandler.verify``)."""

    server = "relay"

    def __init__(
        self,
        handler: RelayHandler,
        open_sessions: set[MailSession],
        implicit_tls: bool,
        metrics: Metrics | None = None,
        **options: Any,
    ) -> None:
        super().__init__(handler, open_sessions, implicit_tls, metrics, **options)
        self.relay = handler

    async def auth_PLAIN(self, _: object, args: list[str]) -> AuthResult:
        return await self.relay.verify(await super().auth_PLAIN(_, args))

    async def auth_LOGIN(self, _: object, args: list[str]) -> AuthResult:
        return await self.relay.verify(await super().auth_LOGIN(_, args))

    def _authenticate(self, mechanism: str, auth_data: Any) -> AuthResult:
        # aiosmtpd checks credentials synchronously; pass them on to the async ``verify``.
        return AuthResult(success=True, handled=False, auth_data=auth_data)


@dataclass(frozen=True)
class RelayLogin:
    """What a session keeps after AUTH: the key, checked again for every message."""

    token: str = field(repr=False)


class RelayHandler:
    """The aiosmtpd handler: authenticates API keys and submits each message to the send path."""

    def __init__(self, services: Services, in_flight: InFlight) -> None:
        self.services = services
        self.in_flight = in_flight

    async def verify(self, parsed: AuthResult) -> AuthResult:
        """Check parsed credentials: user ``posthaste``, password an active API key."""
        credentials = parsed.auth_data
        if not parsed.success or not isinstance(credentials, LoginPassword):
            return parsed
        try:
            login = await self._login(credentials)
        except PosthasteError as exc:
            return AuthResult(success=False, handled=False, message=reply_line(exc))
        except Exception:
            log.exception("relay authentication failed")
            return AuthResult(success=False, handled=False, message=AUTH_UNAVAILABLE)
        return AuthResult(success=True, auth_data=login)

    async def _login(self, credentials: LoginPassword) -> RelayLogin:
        user = bytes(credentials.login).decode("utf-8", "replace")
        token = bytes(credentials.password).decode("utf-8", "replace").strip()
        if user.strip().lower() != USERNAME or not token:
            raise InvalidApiKey(f"Log in as user '{USERNAME}' with an API key as the password.")
        await self.services.api_keys.authenticate(token)
        return RelayLogin(token)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return TOO_MANY_RECIPIENTS
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        login = session.auth_data
        if not isinstance(login, RelayLogin):  # aiosmtpd requires AUTH before MAIL
            return "530 5.7.0 Authentication required"
        with self.in_flight.message():
            return await self._submit(login, envelope)

    async def _submit(self, login: RelayLogin, envelope: Envelope) -> str:
        try:
            # Per message, not once per session: a revoked key or new limits take effect at
            # once (authenticate() remembers keys for a few seconds, so this costs no query).
            principal = await self.services.api_keys.authenticate(login.token)
            email_id = await self.submit(principal, taken_message(envelope), envelope.rcpt_tos)
        except PosthasteError as exc:
            return reply_line(exc)
        except Exception as exc:
            log.exception("relay submission failed")
            return reply_line(exc)
        log.info("relay accepted email %s", email_id, extra={"fields": {"email_id": email_id}})
        return f"250 OK {email_id}"

    async def submit(self, principal: Principal, raw: bytes, recipients: Sequence[str]) -> str:
        """Rate limit, read and accept one message; the accepted (or replayed) email's id."""
        services = self.services
        await services.rate_limiter.check(principal)
        submission = await _parse(raw, recipients)
        del raw  # the request holds what is kept (the same bytes unless its header changed)
        key = submission.idempotency_key
        idempotency = None if key is None else idempotency_key(key, submission.fingerprint)
        accepted = await services.sending.accept(
            principal.sender, Origin.RELAY, submission.request, idempotency=idempotency
        )
        return accepted.id


async def _parse(raw: bytes, recipients: Sequence[str]) -> Submission:
    now = datetime.now(UTC)
    if len(raw) > OFFLOAD_PARSE_BYTES:
        return await asyncio.to_thread(parse_submission, raw, list(recipients), now)
    return parse_submission(raw, recipients, now)


def _drop_login_data_notice(record: logging.LogRecord) -> bool:
    """aiosmtpd logs a deprecation notice at every AUTH it handles; it is about its own code."""
    return "login_data is deprecated" not in record.getMessage()


@dataclass
class RelayServer(MailServer):
    """The relay's listeners: STARTTLS on one port, implicit TLS on the other."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    name = "SMTP relay"

    @classmethod
    def from_settings(
        cls, services: Services, bound: dict[int, socket.socket] | None = None
    ) -> RelayServer:
        """The configured ports (0 = off) on the API's host."""
        settings = services.settings
        ports = [(settings.smtp_relay_port, False), (settings.smtp_relay_tls_port, True)]
        listeners = [Listener(port, implicit) for port, implicit in ports if port]
        return cls(
            services, settings.http_host, listeners, hostname=settings.mx_host, bound=bound or {}
        )

    def make_handler(self) -> RelayHandler:
        logging.getLogger("mail.log").addFilter(_drop_login_data_notice)
        return RelayHandler(self.services, self.in_flight)

    def make_session(
        self, handler: RelayHandler, context: ssl.SSLContext, implicit: bool
    ) -> RelaySMTP:
        return RelaySMTP(
            handler,
            self.sessions,
            implicit,
            self.services.metrics,
            hostname=self.hostname,
            ident="Posthaste relay",
            data_size_limit=self.max_message_bytes,
            enable_SMTPUTF8=True,
            tls_context=None if implicit else context,
            require_starttls=not implicit,
            auth_required=True,
            auth_require_tls=True,
        )
