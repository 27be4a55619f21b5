"""What the SMTP servers share: the session (aiosmtpd's, made faster where it was measured to
matter) and the listening life cycle (start, serve, drain, stop).

The relay (``smtp.relay``) adds API-key AUTH to the session; the inbound server
(``smtp.inbound``) runs it without AUTH. Both answer aiosmtpd's own error replies with enhanced
status codes (``smtp.replies.ENHANCED``).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import logging
import re
import socket
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, AnyStr, cast

from aiosmtpd.smtp import MISSING, SMTP, Envelope, syntax

from posthaste.bootstrap import Services
from posthaste.logs import SESSION_ID, logged_with
from posthaste.services.metrics import Metrics
from posthaste.smtp.data import read_message
from posthaste.smtp.replies import ENHANCED
from posthaste.smtp.tls import server_context

log = logging.getLogger(__name__)

DRAIN_SECONDS = 5.0  # at stop, how long messages already submitted may take to get their reply
SHARE_PORTS = hasattr(socket, "SO_REUSEPORT")  # Linux, BSD, macOS
# ``<local@domain>``: dot-atom local part and domain, ASCII; what nearly every client sends.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_PLAIN_PATH = re.compile(
    rf"[ \t]*<({_ATEXT}(?:\.{_ATEXT})*)@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)>(?=[ \t]|$)"
)


class MailSession(SMTP):
    """aiosmtpd's session with enhanced status codes, implicit-TLS awareness, a fast path
    parser, the event loop's own TLS layer and a chunked DATA reader (the relay's and the
    inbound server's).

    Each connection has a ``session_id`` that every log line of the session carries (the task
    serving it starts with it in its context), and ends as one ``posthaste_smtp_sessions``
    count: ``accepted`` (a message was accepted), ``refused`` (none was, and a command got a
    4xx/5xx reply) or ``no_message``."""

    server = "smtp"  # the ``server`` label of its metrics: ``relay`` or ``inbound``

    def __init__(
        self,
        handler: Any,
        open_sessions: set[MailSession],
        implicit_tls: bool,
        metrics: Metrics | None = None,
        **options: Any,
    ) -> None:
        super().__init__(handler, **options)
        self.session_id = uuid.uuid4().hex
        self.metrics = metrics
        self.accepted_messages = 0
        self.refused_commands = 0
        self._counted = False
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
        reader: Any = self._reader
        reader._buffer.clear()  # sent in clear before the handshake: discarded (RFC 3207 §4.2)
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
        # A client may send its EHLO the moment the handshake ends, before this coroutine
        # resumes: it is in the reader already, and aiosmtpd's STARTTLS branch of
        # connection_made clears the reader (it expects only clear text there). Keep it.
        arrived = bytes(reader._buffer)
        self.connection_made(secured)  # aiosmtpd's STARTTLS branch: a new session, over TLS
        if arrived:
            reader.feed_data(arrived)

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
        original = await self._read_message()
        if isinstance(original, str):  # refused, now that the whole message is read
            reply = original
        else:
            content = self._decoded(original)
            if content is None:
                await self.push("500 Error: strict ASCII mode")
                return
            self.envelope.content, self.envelope.original_content = content, original
            # The envelope holds the message now: the handler may let it go when it is done.
            del original, content
            status = await self._call_handler_hook("DATA")
            reply = "250 OK" if status is MISSING else status
        self._set_post_data_state()  # type: ignore[no-untyped-call]
        if reply.startswith("250"):
            self.accepted_messages += 1
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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The task aiosmtpd starts here to serve the session copies this context.
        with logged_with(SESSION_ID, self.session_id):
            super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        self.open_sessions.discard(self)
        with logged_with(SESSION_ID, self.session_id):
            super().connection_lost(error)
        self._count()

    def _count(self) -> None:
        if self._counted or self.metrics is None:
            return
        self._counted = True
        if self.accepted_messages:
            outcome = "accepted"
        else:
            outcome = "refused" if self.refused_commands else "no_message"
        self.metrics.smtp_session(self.server, outcome)

    async def push(self, status: AnyStr) -> None:
        reply = ENHANCED.get(status, status) if isinstance(status, str) else status
        if status[:1] in ("4", "5", b"4", b"5"):
            self.refused_commands += 1
            log.info(
                "refused: %s", reply if isinstance(reply, str) else reply.decode(errors="replace")
            )
        await super().push(reply)


# aiosmtpd logs every command of every session at INFO: a relayed message was six JSON lines
# and a tenth of the relay process's CPU (py-spy during bench.serve's relay step). They are
# kept for DEBUG; at INFO a session logs its start and end, each refusal (above) and what it
# accepted (the handlers).
_PER_COMMAND = frozenset({"%r >> %r", "%r sender: %s", "%r recip: %s"})


def per_command_lines(record: logging.LogRecord) -> bool:
    """The ``mail.log`` filter: aiosmtpd's per-command lines only when logging at DEBUG."""
    if isinstance(record.msg, str) and record.msg in _PER_COMMAND:
        return _debugging()
    return True


class MailLog(logging.Logger):
    """aiosmtpd's logger (``mail.log``, the one it logs through), which leaves its per-command
    lines out before a record is made of them: a logger's filter runs on a record already made
    (the caller's frame found, the record built), five times a relayed message, a few per cent of
    the relay's CPU for lines that are then dropped. ``per_command_lines`` still filters
    whatever reaches the logger otherwise; every other line is logged as before, with
    aiosmtpd's frame as its caller."""

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        if isinstance(msg, str) and msg in _PER_COMMAND and not _debugging():
            return
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1  # this frame is not the caller
        super().info(msg, *args, **kwargs)


def _debugging() -> bool:
    return logging.getLogger().isEnabledFor(logging.DEBUG)


def quiet_mail_log() -> None:
    """Make aiosmtpd's logger a ``MailLog`` (the same logger: its level, handlers and filters),
    with the per-command filter on it."""
    mail_log = logging.getLogger("mail.log")
    mail_log.addFilter(per_command_lines)  # once: filters are a set
    if type(mail_log) is logging.Logger:
        mail_log.__class__ = MailLog


def taken_message(envelope: Envelope) -> bytes:
    """The message of ``envelope``, which then lets go of it: the handler holds the one copy
    and can drop it as soon as what it keeps is made (aiosmtpd resets the envelope after
    DATA anyway)."""
    raw = envelope.original_content
    assert isinstance(raw, bytes)
    envelope.content = envelope.original_content = None
    return raw


_TLS_EXTRA = ("sslcontext", "peercert", "cipher", "compression", "ssl_object")


@dataclass(frozen=True)
class _TlsLayer:
    """Stands in for aiosmtpd's own TLS protocol object, of which it reads ``_extra``."""

    _extra: dict[str, Any]


class InFlight:
    """Messages between the end of DATA and their reply, so that a stop can let them finish."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()

    @contextlib.contextmanager
    def message(self) -> Iterator[None]:
        self.count += 1
        self.idle.clear()
        try:
            yield
        finally:
            self.count -= 1
            if not self.count:
                self.idle.set()


@dataclass
class Listener:
    """One listening socket: STARTTLS offered (``implicit_tls`` False) or TLS from the start."""

    port: int
    implicit_tls: bool


@dataclass
class MailServer(abc.ABC):
    """Listeners started and stopped together; a subclass makes the handler and the sessions."""

    services: Services
    host: str
    listeners: list[Listener]
    hostname: str = "posthaste"
    drain_seconds: float = DRAIN_SECONDS
    # Listening sockets bound by the supervisor, by port: it keeps them open while this
    # process restarts, so that clients wait in the backlog instead of being refused.
    bound: dict[int, socket.socket] = field(default_factory=dict)
    servers: list[asyncio.Server] = field(default_factory=list)
    sessions: set[MailSession] = field(default_factory=set)
    in_flight: InFlight = field(default_factory=InFlight)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    name = "SMTP server"

    @property
    def ports(self) -> list[int]:
        """The bound ports, in the order of ``listeners`` (useful when a port was 0)."""
        return [s.sockets[0].getsockname()[1] for s in self.servers]

    @abc.abstractmethod
    def make_handler(self) -> Any:
        """The aiosmtpd handler of each connection (relay: submission; inbound: the MX)."""

    @abc.abstractmethod
    def make_session(self, handler: Any, context: ssl.SSLContext, implicit: bool) -> MailSession:
        """The SMTP session of one connection."""

    async def start(self) -> None:
        quiet_mail_log()
        context = server_context(self.services.settings)
        handler = self.make_handler()
        loop = asyncio.get_running_loop()
        for listener in self.listeners:
            sessions = functools.partial(self.make_session, handler, context, listener.implicit_tls)
            tls = context if listener.implicit_tls else None
            bound = self.bound.get(listener.port)
            if bound is not None:
                server = await loop.create_server(sessions, sock=bound, ssl=tls)
            else:
                server = await loop.create_server(
                    sessions,
                    self.host,
                    listener.port,
                    ssl=tls,
                    # Several processes of a role on one machine share the ports (one per
                    # core); the kernel spreads new connections among them.
                    reuse_port=SHARE_PORTS,
                )
            self.servers.append(server)
            log.info(
                "%s listening on %s:%s (%s)",
                self.name,
                self.host,
                server.sockets[0].getsockname()[1],
                "implicit TLS" if listener.implicit_tls else "STARTTLS",
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
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.in_flight.idle.wait(), self.drain_seconds)
        for session in list(self.sessions):
            if session.transport is not None:
                session.transport.close()
        for server in self.servers:
            await server.wait_closed()
        self.servers.clear()
        self.sessions.clear()
