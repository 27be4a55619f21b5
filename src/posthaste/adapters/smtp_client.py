"""One SMTP client session with aiosmtplib, written down as it happens.

Every command and reply goes into a ``Transcript`` (with milliseconds since the attempt began)
so each delivery attempt can be shown later; the message body and AUTH credentials never are.
aiosmtplib's exceptions are translated here: a connection that cannot be used is
``SmtpUnavailable`` (refused, timed out, dropped, a refusing greeting, TLS required but not
offered), and a transaction answers one ``RecipientReply`` per recipient. The server's EHLO says
whether it can take a message at all (SMTPUTF8, SIZE, 8BITMIME; else every recipient gets the
permanent reason, nothing is sent) and which MAIL FROM parameters to give (``SIZE=``,
``BODY=8BITMIME``, ``SMTPUTF8``).

``ConnectionPool`` keeps idle connections per destination for reuse and caps how many are open
to one destination at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import aiosmtplib

from posthaste.adapters.envelope import Envelope, RecipientReply
from posthaste.adapters.smtp_pipelining import group_commands, pipelined_transaction
from posthaste.core.tls_reports import TlsResult

TlsMode = Literal["starttls", "implicit", "none"]
_QUEUED_AS = re.compile(r"queued as\s+<?([^\s>;]+)", re.IGNORECASE)
IDLE_SECONDS = 30.0  # an idle connection older than this is closed rather than reused
MAX_TRANSACTIONS = 200  # messages per connection before it is replaced


class Transcript:
    """The commands and replies of one attempt, with elapsed milliseconds."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self.lines: list[dict[str, Any]] = []
        # The conversation's id: its first note, and in every log line logged during it.
        self.session_id = uuid.uuid4().hex
        # When a throttle let the session go (epoch ms): what its replies answer for, which
        # may be long after the transcript began (waiting for a slot, a connection).
        self.admitted_at: int | None = None
        self.note(f"session {self.session_id}")

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self._start) * 1000)

    def _add(self, kind: str, text: str) -> None:
        self.lines.append({"elapsed_ms": self.elapsed_ms(), kind: text})

    def command(self, text: str) -> None:
        self._add("command", text)

    def reply(self, code: int, message: str) -> None:
        self._add("reply", f"{code} {message}".strip())

    def note(self, text: str) -> None:
        self._add("note", text)


class SmtpUnavailable(Exception):
    """This destination cannot take mail now; ``code``/``text`` are the reply to report."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text


class TlsFailure(SmtpUnavailable):
    """TLS that was required could not be had: STARTTLS not offered, or the certificate did
    not verify. ``result`` is its RFC 8460 result type (``core/tls_reports.py``)."""

    def __init__(self, code: int, text: str, result: TlsResult) -> None:
        super().__init__(code, text)
        self.result = result
        self.local_address = ""  # the session's source address, when it got that far


@dataclass(frozen=True)
class Destination:
    """Where to connect: ``host`` is shown in transcripts, ``address`` is dialled."""

    host: str
    port: int
    tls: TlsMode = "starttls"
    address: str | None = None
    tls_required: bool = False
    verify_tls: bool = True
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    # An IP pool's source address to bind and its HELO name (None: the machine's own address,
    # the options' ``local_hostname``).
    source_address: str | None = None
    helo: str | None = None

    @property
    def idle_key(self) -> tuple[str, int, str]:
        """Connections are reused only from the same source address."""
        return (self.host, self.port, self.source_address or "")


@dataclass
class Connection:
    client: aiosmtplib.SMTP
    destination: Destination
    transactions: int = 0
    idle_since: float = field(default_factory=time.monotonic)
    # TLS was up when the connection was ready (what the TLS reports count).
    secured: bool = False
    local_address: str = ""  # the source address the connection left from

    @property
    def encrypted(self) -> bool:
        """TLS is up (implicit, or after STARTTLS)."""
        return self.client.get_transport_info("ssl_object") is not None

    @property
    def verified(self) -> bool:
        """TLS is up and the server's certificate was verified for its host name."""
        return self.destination.verify_tls and self.secured


TlsContextFactory = Callable[[bool], ssl.SSLContext]


@functools.cache
def default_tls_context(verify: bool) -> ssl.SSLContext:
    """Verified for a smarthost; opportunistic (unverified, as MTAs do without DANE) for MX.

    Made once per kind: loading the system's CA bundle costs ~100 ms."""
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def tls_context_for(ca_file: Path | None) -> TlsContextFactory:
    """Verified contexts trusting ``ca_file`` (``POSTHASTE_TLS_CA_FILE``) when given, else
    the system's CAs; unverified ones as ``default_tls_context``."""
    if ca_file is None:
        return default_tls_context

    @functools.cache
    def factory(verify: bool) -> ssl.SSLContext:
        if not verify:
            return default_tls_context(False)
        return ssl.create_default_context(cafile=str(ca_file))

    return factory


@dataclass(frozen=True)
class ClientOptions:
    local_hostname: str
    # Seconds for each step (connecting, each command's reply, the reply to the data): the
    # region's POSTHASTE_SMTP_TIMEOUT. A whole session may take several times as long.
    timeout: float = 30.0
    tls_context: TlsContextFactory = default_tls_context


async def open_connection(
    dest: Destination, options: ClientOptions, transcript: Transcript
) -> Connection:
    """Connect, EHLO, STARTTLS when offered (or required) and AUTH when configured."""
    context = options.tls_context(dest.verify_tls) if dest.tls != "none" else None
    client = aiosmtplib.SMTP(
        hostname=dest.address or dest.host,
        port=dest.port,
        local_hostname=dest.helo or options.local_hostname,
        source_address=(dest.source_address, 0) if dest.source_address else None,
        timeout=options.timeout,
        use_tls=dest.tls == "implicit",
        start_tls=False,
        tls_context=context,
        validate_certs=dest.verify_tls,
    )
    source = f" from {dest.source_address}" if dest.source_address else ""
    transcript.note(f"connecting to {dest.host}:{dest.port} ({dest.address or dest.host}){source}")
    local = ""
    try:
        greeting = await client.connect()
        local = _local_address(client)
        transcript.reply(greeting.code, greeting.message)
        await _handshake(client, dest, options, transcript)
    except SmtpUnavailable as exc:
        if isinstance(exc, TlsFailure):
            exc.local_address = local
        client.close()
        raise
    except Exception as exc:
        client.close()
        raise _unavailable(exc, transcript) from exc
    conn = Connection(client, dest, local_address=local)
    conn.secured = conn.encrypted
    return conn


def _local_address(client: aiosmtplib.SMTP) -> str:
    """The address the connection left from ('' when it cannot be told)."""
    try:
        sockname = client.get_transport_info("sockname")
    except aiosmtplib.SMTPServerDisconnected:
        return ""
    return str(sockname[0]) if isinstance(sockname, tuple) and sockname else ""


async def _handshake(
    client: aiosmtplib.SMTP, dest: Destination, options: ClientOptions, transcript: Transcript
) -> None:
    helo = dest.helo or options.local_hostname
    await _ehlo(client, helo, transcript)
    if dest.tls == "starttls":
        if client.supports_extension("starttls"):
            transcript.command("STARTTLS")
            reply = await _starttls(client, dest, options, transcript)
            transcript.reply(reply.code, reply.message)
            await _ehlo(client, helo, transcript)
        elif dest.tls_required:
            transcript.note("STARTTLS required but not offered")
            raise TlsFailure(
                421,
                "4.7.10 TLS is required but the server did not offer it",
                TlsResult.STARTTLS_NOT_SUPPORTED,
            )
    if dest.username is not None and dest.password is not None:
        transcript.command("AUTH (credentials hidden)")
        reply = await client.login(dest.username, dest.password)
        transcript.reply(reply.code, reply.message)


async def _starttls(
    client: aiosmtplib.SMTP, dest: Destination, options: ClientOptions, transcript: Transcript
) -> aiosmtplib.SMTPResponse:
    """STARTTLS, verifying the certificate for the host *name* when asked; a certificate that
    does not verify is a ``TlsFailure`` naming why."""
    try:
        return await client.starttls(
            server_hostname=dest.host, tls_context=options.tls_context(dest.verify_tls)
        )
    except Exception as exc:
        failure = _certificate_failure(exc) if dest.verify_tls else None
        if failure is None:
            raise  # unverified TLS that fails: a connection failure, as before
        transcript.note(f"TLS certificate of {dest.host} not valid: {failure[1]}")
        raise TlsFailure(
            451, f"4.7.5 TLS certificate of {dest.host} not valid: {failure[1]}", failure[0]
        ) from exc


_VERIFY_RESULTS = {
    62: TlsResult.CERTIFICATE_HOST_MISMATCH,  # X509_V_ERR_HOSTNAME_MISMATCH
    10: TlsResult.CERTIFICATE_EXPIRED,  # X509_V_ERR_CERT_HAS_EXPIRED
}


def _certificate_failure(exc: BaseException) -> tuple[TlsResult, str] | None:
    """The RFC 8460 result and the reason when ``exc`` comes from a certificate that failed
    verification (aiosmtplib wraps the ssl error); None for anything else."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            result = _VERIFY_RESULTS.get(seen.verify_code, TlsResult.CERTIFICATE_NOT_TRUSTED)
            return result, seen.verify_message or str(seen)
        if isinstance(seen, ssl.SSLError):
            return TlsResult.VALIDATION_FAILURE, str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


async def _ehlo(client: aiosmtplib.SMTP, helo: str, transcript: Transcript) -> None:
    transcript.command(f"EHLO {helo}")
    reply = await client.ehlo()
    transcript.reply(reply.code, reply.message.splitlines()[0] if reply.message else "")


def _unavailable(exc: BaseException, transcript: Transcript) -> SmtpUnavailable:
    """A library or socket error as the reply a recipient gets: always temporary here."""
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        transcript.reply(exc.code, exc.message)
        code = exc.code if 400 <= exc.code < 600 else 421
        return SmtpUnavailable(code, exc.message)
    if isinstance(exc, aiosmtplib.SMTPTimeoutError | asyncio.TimeoutError | TimeoutError):
        transcript.note(f"timed out: {exc}")
        return SmtpUnavailable(451, "4.4.1 No answer from the server (timed out)")
    transcript.note(f"connection failed: {exc} {exc.__cause__!r}")
    return SmtpUnavailable(451, f"4.4.1 Connection failed: {exc}")


async def deliver(
    conn: Connection, envelope: Envelope, raw: bytes, transcript: Transcript, final: bool
) -> list[RecipientReply]:
    """One mail transaction: MAIL, RCPT per recipient, DATA for the accepted ones.

    Raises ``SmtpUnavailable`` when the connection fails before any recipient has an answer.
    """
    client = conn.client
    conn.transactions += 1
    eight_bit = not raw.isascii()
    refusal = _cannot_take(client, envelope, raw, eight_bit, transcript)
    if refusal is not None:
        return [RecipientReply(r, *refusal, final) for r in envelope.recipients]
    try:
        options = _mail_options(client, envelope, len(raw), eight_bit)
        if client.supports_extension("pipelining"):
            return await _deliver_pipelined(conn, envelope, raw, transcript, final, options)
        refused = await _mail_from(client, envelope, transcript, options)
        if refused is not None:
            return [RecipientReply(r, refused[0], refused[1], final) for r in envelope.recipients]
        answers = await _rcpt_each(client, envelope.recipients, transcript)
        accepted = [r for r, (code, _) in answers.items() if 200 <= code < 300]
        if not accepted:
            await _rset(client, transcript)
            return [RecipientReply(r, c, t, final) for r, (c, t) in answers.items()]
        code, text = await _data(client, raw, transcript)
    except SmtpUnavailable:
        raise
    except Exception as exc:
        raise _unavailable(exc, transcript) from exc
    # PRODUCT §5: a relay's id from its reply; at the final destination, our own Message-ID.
    provider_id = envelope.message_id if final else provider_message_id(text)
    return [
        RecipientReply(r, code, text, final, provider_id)
        if r in accepted
        else RecipientReply(r, c, t, final)
        for r, (c, t) in answers.items()
    ]


async def _deliver_pipelined(
    conn: Connection,
    envelope: Envelope,
    raw: bytes,
    transcript: Transcript,
    final: bool,
    options: list[str],
) -> list[RecipientReply]:
    """``deliver`` as one pipelined group (RFC 2920): the same replies per recipient; the
    transcript has the commands in the order written and the replies as read."""
    client = conn.client
    recipients = list(envelope.recipients)
    commands = group_commands(envelope.mail_from, options, recipients, envelope.smtputf8)
    replies = await pipelined_transaction(
        client, commands, recipients, raw, client.timeout, transcript
    )
    if not 200 <= replies.mail[0] < 300:
        await _rset(client, transcript)
        return [RecipientReply(r, *replies.mail, final) for r in recipients]
    if replies.data is None:
        await _rset(client, transcript)
        return [RecipientReply(r, c, t, final) for r, (c, t) in replies.recipients.items()]
    code, text = replies.data
    provider_id = envelope.message_id if final else provider_message_id(text)
    return [
        RecipientReply(r, code, text, final, provider_id)
        if 200 <= c < 300
        else RecipientReply(r, c, t, final)
        for r, (c, t) in replies.recipients.items()
    ]


def _cannot_take(
    client: aiosmtplib.SMTP, envelope: Envelope, raw: bytes, eight_bit: bool, transcript: Transcript
) -> tuple[int, str] | None:
    """Why the server cannot take this message as it is, from its EHLO; None when it can.

    Each is permanent for the message: it would be refused the same way on every retry."""
    if envelope.smtputf8 and not client.supports_extension("smtputf8"):
        transcript.note("the message needs SMTPUTF8, which the server does not offer")
        return 550, "5.6.7 The recipient's server does not support SMTPUTF8"
    limit = size_limit(client.esmtp_extensions)
    if limit is not None and len(raw) > limit:
        transcript.note(
            f"the message has {len(raw)} bytes, the server takes at most {limit} (SIZE)"
        )
        return 552, (
            f"5.3.4 Message too big: {len(raw)} bytes, "
            f"the recipient's server accepts at most {limit}"
        )
    if eight_bit and not client.supports_extension("8bitmime"):
        # RFC 6152: convert to 7-bit or do not send. Converting after DKIM signing would
        # break the signature, so the message is refused here (docs/delivery.md).
        transcript.note("the message has 8-bit content, the server does not offer 8BITMIME")
        return 554, "5.6.3 The message has 8-bit content and the recipient's server lacks 8BITMIME"
    return None


def size_limit(extensions: dict[str, str]) -> int | None:
    """The fixed maximum of ``SIZE <n>`` (RFC 1870); None when absent, unstated or 0 (no limit)."""
    value = extensions.get("size", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _mail_options(
    client: aiosmtplib.SMTP, envelope: Envelope, size: int, eight_bit: bool
) -> list[str]:
    """``SIZE=`` when offered, ``BODY=8BITMIME`` for 8-bit content, ``SMTPUTF8`` when needed."""
    options = [f"SIZE={size}"] if client.supports_extension("size") else []
    if eight_bit:  # ``_cannot_take`` has checked that the server offers 8BITMIME
        options.append("BODY=8BITMIME")
    if envelope.smtputf8:
        options.append("SMTPUTF8")
    return options


async def _mail_from(
    client: aiosmtplib.SMTP, envelope: Envelope, transcript: Transcript, options: list[str]
) -> tuple[int, str] | None:
    smtputf8 = "SMTPUTF8" in options
    transcript.command(" ".join([f"MAIL FROM:<{envelope.mail_from}>", *options]))
    try:
        reply = await client.mail(
            envelope.mail_from, options=options, encoding="utf-8" if smtputf8 else "ascii"
        )
    except aiosmtplib.SMTPResponseException as exc:
        transcript.reply(exc.code, exc.message)
        await _rset(client, transcript)
        return exc.code, exc.message
    transcript.reply(reply.code, reply.message)
    return None


async def _rcpt_each(
    client: aiosmtplib.SMTP, recipients: Sequence[str], transcript: Transcript
) -> dict[str, tuple[int, str]]:
    answers: dict[str, tuple[int, str]] = {}
    for recipient in recipients:
        transcript.command(f"RCPT TO:<{recipient}>")
        encoding = "ascii" if recipient.isascii() else "utf-8"
        try:
            reply = await client.rcpt(recipient, encoding=encoding)
        except aiosmtplib.SMTPResponseException as exc:
            transcript.reply(exc.code, exc.message)
            answers[recipient] = (exc.code, exc.message)
            continue
        transcript.reply(reply.code, reply.message)
        answers[recipient] = (reply.code, reply.message)
    return answers


async def _data(client: aiosmtplib.SMTP, raw: bytes, transcript: Transcript) -> tuple[int, str]:
    transcript.command(f"DATA ({len(raw)} bytes, not shown)")
    try:
        reply = await client.data(raw)
    except aiosmtplib.SMTPResponseException as exc:
        transcript.reply(exc.code, exc.message)
        return exc.code, exc.message
    transcript.reply(reply.code, reply.message)
    return reply.code, reply.message


async def _rset(client: aiosmtplib.SMTP, transcript: Transcript) -> None:
    transcript.command("RSET")
    with contextlib.suppress(aiosmtplib.SMTPException):
        reply = await client.rset()
        transcript.reply(reply.code, reply.message)


def provider_message_id(reply_text: str) -> str:
    """The id a relay gave the message: ``queued as X`` when it says so, else its reply text."""
    found = _QUEUED_AS.search(reply_text)
    return found.group(1) if found else reply_text.strip()


class _Cap:
    __slots__ = ("semaphore", "users")

    def __init__(self, limit: int) -> None:
        self.semaphore = asyncio.Semaphore(limit)
        self.users = 0  # holding it or waiting for it


K = TypeVar("K", bound=Hashable)


class Caps(Generic[K]):
    """At most ``limit`` holders per key at once.

    A key's semaphore exists only while someone holds it or waits for it, so the map is bounded
    by the sessions in flight and not by every destination ever met: a sender to a million
    recipient domains would otherwise keep a semaphore per domain for the process's life. The
    limit is the one given by the first holder of a busy key; a key that fell idle takes the
    next holder's."""

    def __init__(self) -> None:
        self._caps: dict[K, _Cap] = {}

    def __len__(self) -> int:
        return len(self._caps)

    @contextlib.asynccontextmanager
    async def hold(self, key: K, limit: int) -> AsyncIterator[None]:
        cap = self._caps.get(key)
        if cap is None:
            cap = self._caps[key] = _Cap(limit)
        cap.users += 1
        try:
            async with cap.semaphore:
                yield
        finally:
            cap.users -= 1
            if cap.users == 0:
                del self._caps[key]


class ConnectionPool:
    """Idle connections per destination, and a cap on connections open to each at once.

    A destination is a ``(host name, port)`` key: an MX host with several addresses shares one
    cap and one set of idle connections. Neither map keeps a destination with nothing in it."""

    def __init__(self, per_destination: int = 8) -> None:
        self.per_destination = per_destination
        # Idle connections by (host, port, source address): see ``Destination.idle_key``.
        self._idle: dict[tuple[str, int, str], list[Connection]] = {}
        self._caps: Caps[tuple[str, int]] = Caps()
        self._swept = time.monotonic()

    @contextlib.asynccontextmanager
    async def slot(self, key: tuple[str, int]) -> AsyncIterator[None]:
        """Hold one of the destination's connection slots."""
        async with self._caps.hold(key, self.per_destination):
            yield

    def take_idle(self, key: tuple[str, int, str]) -> Connection | None:
        idle = self._idle.get(key)
        found = None
        while idle and found is None:
            conn = idle.pop()
            fresh = time.monotonic() - conn.idle_since < IDLE_SECONDS
            if fresh and conn.client.is_connected:
                found = conn
            else:
                conn.client.close()
        if idle is not None and not idle:
            del self._idle[key]
        return found

    def sizes(self) -> tuple[int, int]:
        """Destinations with idle connections, and destinations with a session or a wait."""
        return len(self._idle), len(self._caps)

    def give_back(
        self, key: tuple[str, int, str], conn: Connection, most: int = MAX_TRANSACTIONS
    ) -> None:
        """Keep ``conn`` idle for reuse, unless it has carried ``most`` messages or is closed."""
        if conn.transactions >= most or not conn.client.is_connected:
            conn.client.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(key, []).append(conn)
        if conn.idle_since - self._swept >= IDLE_SECONDS:
            self._sweep(conn.idle_since)

    def _sweep(self, now: float) -> None:
        """Close the connections idle too long to be reused (``take_idle`` would close them
        if their destination were ever sent to again, which it may never be)."""
        self._swept = now
        for key in list(self._idle):
            kept = []
            for conn in self._idle[key]:
                if now - conn.idle_since < IDLE_SECONDS and conn.client.is_connected:
                    kept.append(conn)
                else:
                    conn.client.close()
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]

    async def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.client.close()
        self._idle.clear()
