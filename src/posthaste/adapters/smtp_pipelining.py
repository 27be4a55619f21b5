"""One mail transaction as a pipelined group (RFC 2920), for servers that offer PIPELINING.

MAIL, every RCPT and DATA go out in one write and their replies are read as they come; the
message follows in a second write once DATA is answered 354: two writes and two waits for a
reply per message where one command at a time takes four or more. On a loopback or a busy
worker each write and each wake-up is CPU (bench/README.md, "Delivery: PIPELINING").

aiosmtplib reads one reply per command it wrote, and drops what arrives while a parsed reply
waits to be picked up, so it cannot read a group's replies. For the group, the connection's
transport is handed to ``_Replies`` (asyncio's ``set_protocol``), which parses every reply it
is given, and handed back to aiosmtplib's protocol after the last one. The bytes on the wire
are aiosmtplib's own: the same quoting, line endings and dot-stuffing as its ``data()``.
"""

from __future__ import annotations

import asyncio
import collections
import re
from dataclasses import dataclass
from typing import Protocol, cast

import aiosmtplib
from aiosmtplib.email import quote_address

# aiosmtplib's limits and its DATA normalisation (aiosmtplib/protocol.py), kept the same.
MAX_REPLY_BYTES = 8192 * 4
_LINE_ENDINGS = re.compile(rb"(?:\r\n|\n|\r(?!\n))")
_LEADING_PERIOD = re.compile(rb"(?m)^\.")
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")

Reply = tuple[int, str]


class Notes(Protocol):
    """Where each command is noted as written and each reply as read (``Transcript``)."""

    def command(self, text: str) -> None: ...

    def reply(self, code: int, message: str) -> None: ...


@dataclass(frozen=True)
class GroupReplies:
    """The replies to a pipelined transaction: MAIL, each RCPT, and the message's final reply
    (DATA's own refusal when it was not answered 354; None when nothing was to be sent)."""

    mail: Reply
    recipients: dict[str, Reply]
    data: Reply | None


class _Replies(asyncio.Protocol):
    """Every SMTP reply the server sends while installed, parsed in order."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._ready: collections.deque[aiosmtplib.SMTPResponse] = collections.deque()
        self._failure: Exception | None = None
        self._wake: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            while (reply := self._parse()) is not None:
                self._ready.append(reply)
        except aiosmtplib.SMTPResponseException as exc:
            self._failure = exc
        self._notify()

    def eof_received(self) -> bool:
        self._fail(aiosmtplib.SMTPServerDisconnected("Unexpected EOF received"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(aiosmtplib.SMTPServerDisconnected(f"Connection lost: {exc or 'closed'}"))

    def _fail(self, exc: Exception) -> None:
        self._failure = self._failure or exc
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _parse(self) -> aiosmtplib.SMTPResponse | None:
        """The first whole reply in the buffer (taken out of it), or None yet."""
        lines: list[bytes] = []
        offset = 0
        while (end := self._buffer.find(b"\n", offset)) != -1:
            line = bytes(self._buffer[offset : end + 1])
            offset = end + 1
            if not line[:3].isdigit():
                raise aiosmtplib.SMTPResponseException(-1, f"Malformed SMTP reply: {line!r}")
            lines.append(line[4:].strip(b" \t\r\n"))
            if line[3:4] != b"-":
                del self._buffer[:offset]
                text = b"\n".join(lines).decode("utf-8", "surrogateescape")
                return aiosmtplib.SMTPResponse(int(line[:3]), text)
        if len(self._buffer) > MAX_REPLY_BYTES:
            raise aiosmtplib.SMTPResponseException(-1, "Response too long")
        return None

    async def next(self, wait: float | None) -> aiosmtplib.SMTPResponse:
        """The next reply, waiting ``wait`` seconds at most for it."""
        while not self._ready:
            if self._failure is not None:
                raise self._failure
            self._wake = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._wake, wait)
            except TimeoutError as exc:
                raise aiosmtplib.SMTPReadTimeoutError("Timed out waiting for a reply") from exc
        return self._ready.popleft()


def message_bytes(raw: bytes) -> bytes:
    """What DATA sends for ``raw``: CRLF line endings, leading periods doubled, the end mark."""
    message = _LINE_ENDINGS.sub(b"\r\n", raw)
    if not message.endswith(b"\r\n"):
        message += b"\r\n"
    return _LEADING_PERIOD.sub(b"..", message) + b".\r\n"


def group_commands(
    mail_from: str, options: list[str], recipients: list[str], smtputf8: bool
) -> list[bytes]:
    """MAIL, each RCPT and DATA, as aiosmtplib would write them one at a time."""
    sender = quote_address(mail_from).encode("utf-8" if smtputf8 else "ascii")
    commands = [b" ".join([b"MAIL FROM:" + sender, *(o.encode("ascii") for o in options)])]
    for recipient in recipients:
        encoding = "ascii" if recipient.isascii() else "utf-8"
        commands.append(b"RCPT TO:" + quote_address(recipient).encode(encoding))
    commands.append(b"DATA")
    if any(_CONTROL.search(command) for command in commands):
        raise ValueError("an address contains a control character")
    return commands


async def pipelined_transaction(
    client: aiosmtplib.SMTP,
    commands: list[bytes],
    recipients: list[str],
    raw: bytes,
    wait: float | None,
    notes: Notes,
) -> GroupReplies:
    """Send ``commands`` (``group_commands``) in one write, then the message if DATA is
    answered 354 and a recipient was accepted, waiting ``wait`` seconds at most for each reply;
    each command and reply noted in ``notes`` as it goes. Any failure leaves the connection
    unusable: the caller closes it."""
    transport = cast(asyncio.Transport | None, client.transport)  # uvloop's is no subclass
    if transport is None or transport.is_closing():
        raise aiosmtplib.SMTPServerDisconnected("Connection lost")
    original = transport.get_protocol()
    replies = _Replies()
    transport.set_protocol(replies)
    try:
        transport.write(b"\r\n".join(commands) + b"\r\n")
        for command in commands:
            notes.command(command.decode("utf-8", "replace"))
        group = [await _next(replies, wait, notes) for _ in commands]
        mail, data = group[0], group[-1]
        rcpts = zip(recipients, group[1:-1], strict=True)
        answers = {r: (reply.code, reply.message) for r, reply in rcpts}
        accepted = 200 <= mail.code < 300 and any(200 <= c < 300 for c, _ in answers.values())
        final: Reply | None = None
        if data.code == 354:
            # RFC 2920 §3.1: a 354 with no recipient accepted still needs the end mark.
            transport.write(message_bytes(raw) if accepted else b".\r\n")
            notes.command(f"({len(raw)} bytes, not shown)" if accepted else ".")
            last = await _next(replies, wait, notes)
            final = (last.code, last.message) if accepted else None
        elif accepted:
            final = (data.code, data.message)
    finally:
        if not transport.is_closing():
            transport.set_protocol(original)
    return GroupReplies((mail.code, mail.message), answers, final)


async def _next(replies: _Replies, wait: float | None, notes: Notes) -> aiosmtplib.SMTPResponse:
    reply = await replies.next(wait)
    notes.reply(reply.code, reply.message)
    return reply
