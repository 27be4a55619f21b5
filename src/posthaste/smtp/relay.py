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
import contextlib
import functools
import logging
import re
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, AnyStr, cast

from aiosmtpd.smtp import MISSING, SMTP, AuthResult, Envelope, LoginPassword, Session, syntax

from posthaste.bootstrap import Services
from posthaste.core.idempotency import idempotency_key
from posthaste.core.models import Origin, Principal
from posthaste.core.send_request import MAX_RECIPIENTS
from posthaste.core.submission import Submission, parse_submission
from posthaste.errors import InvalidApiKey, PosthasteError
from posthaste.smtp.data import read_message, unstuff
from posthaste.smtp.replies import ENHANCED, reply_line
from posthaste.smtp.tls import server_context

log = logging.getLogger(__name__)

USERNAME = "posthaste"
MAX_MESSAGE_BYTES = 25 * 1024 * 1024  # the API's request limit (PRODUCT §3), advertised as SIZE
OFFLOAD_PARSE_BYTES = 256 * 1024  # bigger messages are parsed off the event loop
TOO_MANY_RECIPIENTS = f"452 4.5.3 Too many recipients; at most {MAX_RECIPIENTS} per message"
DRAIN_SECONDS = 5.0  # at stop, how long messages already submitted may take to get their reply
SHARE_PORTS = hasattr(socket, "SO_REUSEPORT")  # Linux, BSD, macOS
AUTH_UNAVAILABLE = "454 4.7.0 Temporary authentication failure; retry later"
# ``<local@domain>``: dot-atom local part and domain, ASCII; what nearly every client sends.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_PLAIN_PATH = re.compile(
    rf"[ \t]*<({_ATEXT}(?:\.{_ATEXT})*)@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)>(?=[ \t]|$)"
)


class RelaySMTP(SMTP):
    """aiosmtpd's server with API-key AUTH, enhanced status codes and implicit-TLS awareness."""

    def __init__(
        self,
        handler: RelayHandler,
        open_sessions: set[RelaySMTP],
        implicit_tls: bool,
        **options: Any,
    ) -> None:
        super().__init__(handler, **options)
        self.relay = handler
        self.open_sessions = open_sessions
        open_sessions.add(self)
        if implicit_tls:
            # The socket is TLS from the first byte; aiosmtpd only knows about STARTTLS.
            self._auth_require_tls = False

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        """MAIL/RCPT paths: a plain ``<local@domain>`` without the stdlib's header parser
        (a sixth of the relay's CPU per message went there); anything else as aiosmtpd does."""
        match = _PLAIN_PATH.match(arg)
        if match is None or (
            self.local_part_limit and match.end(1) - match.start(1) > self.local_part_limit
        ):
            return self._parsed_path(arg)
        rest = arg[match.end() :].lstrip(" \t")  # the path's trailing white space is its own
        if rest.startswith("("):  # a comment: the parser's business
            return self._parsed_path(arg)
        return match.group(1) + "@" + match.group(2), rest

    def _parsed_path(self, arg: str) -> tuple[str | None, str | None]:
        """aiosmtpd's parsing; a path the stdlib's parser trips over (``MAIL FROM:<`` raises
        IndexError there, ``MAIL FROM:.@[`` AttributeError) is a malformed address, not a 500
        with a Python error in it."""
        try:
            return super()._getaddr(arg)
        except (IndexError, ValueError, AttributeError):
            return None, None

    @syntax("STARTTLS", when="tls_context")
    async def smtp_STARTTLS(self, arg: str) -> None:
        """aiosmtpd's STARTTLS, with the event loop's own TLS layer (``loop.start_tls``): on
        uvloop compiled code, where aiosmtpd wraps the socket in asyncio's pure-Python
        ``sslproto`` (an eighth of the relay's CPU per message went there)."""
        if arg:
            await self.push("501 Syntax: STARTTLS")
            return
        if not self.tls_context or self.transport is None:
            await self.push("454 TLS not available")
            return
        await self.push("220 Ready to start TLS")
        plain = cast(asyncio.WriteTransport, self.transport)
        try:
            secured = await self.loop.start_tls(plain, self, self.tls_context, server_side=True)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            # start_tls closed the connection: connection_lost follows.
            log.info("STARTTLS handshake failed: %s", exc)
            return
        if secured is None:
            return
        self._original_transport = plain
        # What aiosmtpd reads of its TLS layer: that there is one, and the session's details.
        layer = _TlsLayer({name: secured.get_extra_info(name) for name in _TLS_EXTRA})
        self._tls_protocol = layer  # type: ignore[assignment]  # read as the sslproto it stands for
        self.connection_made(secured)  # aiosmtpd's STARTTLS branch: a new session, over TLS

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        """aiosmtpd's DATA, with the message read in the chunks it arrives in rather than a
        line at a time (``smtp.data``; a share of the relay's CPU per message went there);
        the same checks, limits and replies."""
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        raw = await self._read_message()
        if isinstance(raw, str):  # refused, now that the whole message is read
            reply = raw
        else:
            original = unstuff(raw)
            content = self._decoded(original)
            if content is None:
                await self.push("500 Error: strict ASCII mode")
                return
            self.envelope.content, self.envelope.original_content = content, original
            status = await self._call_handler_hook("DATA")
            reply = "250 OK" if status is MISSING else status
        self._set_post_data_state()  # type: ignore[no-untyped-call]
        await self.push(reply)

    async def _read_message(self) -> bytes | str:
        try:
            return await read_message(self._reader, self.data_size_limit, self.line_length_limit)
        except asyncio.CancelledError:  # the connection is gone: nothing is submitted
            log.info("Connection lost during DATA")
            self._writer.close()
            raise

    def _decoded(self, original: bytes) -> bytes | str | None:
        """The envelope's content as aiosmtpd gives it (``decode_data``); None: not ASCII."""
        if not self._decode_data:
            return original
        if self.enable_SMTPUTF8:
            return original.decode("utf-8", errors="surrogateescape")
        try:
            return original.decode("ascii", errors="strict")
        except UnicodeDecodeError:
            return None

    def connection_lost(self, error: Exception | None) -> None:
        self.open_sessions.discard(self)
        super().connection_lost(error)

    async def push(self, status: AnyStr) -> None:
        if isinstance(status, str):
            await super().push(ENHANCED.get(status, status))
        else:
            await super().push(status)

    async def auth_PLAIN(self, _: object, args: list[str]) -> AuthResult:
        return await self.relay.verify(await super().auth_PLAIN(_, args))

    async def auth_LOGIN(self, _: object, args: list[str]) -> AuthResult:
        return await self.relay.verify(await super().auth_LOGIN(_, args))

    def _authenticate(self, mechanism: str, auth_data: Any) -> AuthResult:
        # aiosmtpd checks credentials synchronously; pass them on to the async ``verify``.
        return AuthResult(success=True, handled=False, auth_data=auth_data)


_TLS_EXTRA = ("sslcontext", "peercert", "cipher", "compression", "ssl_object")


@dataclass(frozen=True)
class _TlsLayer:
    """Stands in for aiosmtpd's own TLS protocol object, of which it reads ``_extra``."""

    _extra: dict[str, Any]


@dataclass(frozen=True)
class RelayLogin:
    """What a session keeps after AUTH: the key, checked again for every message."""

    token: str = field(repr=False)


class RelayHandler:
    """The aiosmtpd handler: authenticates API keys and submits each message to the send path."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.in_flight = 0  # messages between the end of DATA and their reply
        self.idle = asyncio.Event()
        self.idle.set()

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
        self.in_flight += 1
        self.idle.clear()
        try:
            # Per message, not once per session: a revoked key or new limits take effect at
            # once (authenticate() remembers keys for a few seconds, so this costs no query).
            principal = await self.services.api_keys.authenticate(login.token)
            email_id = await self.submit(principal, bytes(envelope.content), envelope.rcpt_tos)
        except PosthasteError as exc:
            return reply_line(exc)
        except Exception as exc:
            log.exception("relay submission failed")
            return reply_line(exc)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self.idle.set()
        return f"250 OK {email_id}"

    async def submit(self, principal: Principal, raw: bytes, recipients: Sequence[str]) -> str:
        """Rate limit, read and accept one message; the accepted (or replayed) email's id."""
        services = self.services
        await services.rate_limiter.check(principal)
        submission = await _parse(raw, recipients)
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
class Listener:
    """One listening socket: STARTTLS offered (``implicit_tls`` False) or TLS from the start."""

    port: int
    implicit_tls: bool


@dataclass
class RelayServer:
    """The relay's listeners, started and stopped together."""

    services: Services
    host: str
    listeners: list[Listener]
    hostname: str = "posthaste"
    max_message_bytes: int = MAX_MESSAGE_BYTES
    drain_seconds: float = DRAIN_SECONDS
    servers: list[asyncio.Server] = field(default_factory=list)
    sessions: set[RelaySMTP] = field(default_factory=set)
    handler: RelayHandler | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def from_settings(cls, services: Services) -> RelayServer:
        """The configured ports (0 = off) on the API's host."""
        settings = services.settings
        ports = [(settings.smtp_relay_port, False), (settings.smtp_relay_tls_port, True)]
        listeners = [Listener(port, implicit) for port, implicit in ports if port]
        return cls(services, settings.http_host, listeners, hostname=settings.mx_host)

    @property
    def ports(self) -> list[int]:
        """The bound ports, in the order of ``listeners`` (useful when a port was 0)."""
        return [s.sockets[0].getsockname()[1] for s in self.servers]

    async def start(self) -> None:
        logging.getLogger("mail.log").addFilter(_drop_login_data_notice)
        context = server_context(self.services.settings)
        handler = self.handler = RelayHandler(self.services)
        loop = asyncio.get_running_loop()
        for listener in self.listeners:
            server = await loop.create_server(
                functools.partial(self._session, handler, context, listener.implicit_tls),
                self.host,
                listener.port,
                ssl=context if listener.implicit_tls else None,
                # Several ``--role smtp`` processes on one machine share the ports (one per
                # core); the kernel spreads new connections among them.
                reuse_port=SHARE_PORTS,
            )
            self.servers.append(server)
            log.info(
                "SMTP relay listening on %s:%s (%s)",
                self.host,
                server.sockets[0].getsockname()[1],
                "implicit TLS" if listener.implicit_tls else "STARTTLS",
            )

    def _session(self, handler: RelayHandler, context: ssl.SSLContext, implicit: bool) -> RelaySMTP:
        return RelaySMTP(
            handler,
            self.sessions,
            implicit,
            hostname=self.hostname,
            ident="Posthaste relay",
            data_size_limit=self.max_message_bytes,
            enable_SMTPUTF8=True,
            tls_context=None if implicit else context,
            require_starttls=not implicit,
            auth_required=True,
            auth_require_tls=True,
        )

    async def run(self) -> None:
        """Serve until ``stop()``; a port that cannot be bound ends this (and the process)."""
        try:
            await self.start()
            await self._stop.wait()
        finally:
            await self.close()

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        """Stop listening, let messages being accepted get their reply, then hang up."""
        for server in self.servers:
            server.close()
        if self.handler is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.handler.idle.wait(), self.drain_seconds)
        for session in list(self.sessions):
            if session.transport is not None:
                session.transport.close()
        for server in self.servers:
            await server.wait_closed()
        self.servers.clear()
        self.sessions.clear()
