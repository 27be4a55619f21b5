"""A message's DATA read as aiosmtpd 1.4.6 reads it, in the chunks it arrives in.

aiosmtpd's ``smtp_DATA`` asks its stream reader for one line at a time, counting and un-stuffing
each; with TLS that was a visible share of the relay's CPU per message. Here the reader is asked
for the end-of-data sequence itself and the lines are looked at only where a limit makes them
matter, with the outcome aiosmtpd gives for every byte stream:

- lines end at CRLF only (a bare LF or CR is part of its line);
- the message ends at the first line that is a single dot; what follows stays in the reader
  (a client may pipeline its next command);
- a message over the size limit, or with a line over the line limit, is read to its end and
  refused with aiosmtpd's reply for whichever of the two it met first, and its bytes are not
  kept past the size limit;
- every line's leading dot is removed (RFC 5321 §4.5.2), as the chunks are let go: reading holds
  about one copy of the message at a time, where chunks, their join and the join unstuffed were
  three.
"""

from __future__ import annotations

import asyncio
import io
import math

TOO_LONG = "500 Line too long (see RFC5321 4.5.3.1.6)"
TOO_MUCH = "552 Error: Too much mail data"
_END = b"\r\n.\r\n"  # the end line, with the CRLF of the line before it


async def read_message(
    reader: asyncio.StreamReader, size_limit: int | None, line_limit: int
) -> bytes | str:
    """The message (every line's leading dot removed), its last line's CRLF included, or the
    reply that refuses it. ``line_limit`` is aiosmtpd's, which is also its stream reader's limit."""
    message = _Message(size_limit, line_limit)
    if await _read_opening(reader, message):
        return message.result()
    while True:
        try:
            chunk = await reader.readuntil(_END)
        except asyncio.LimitOverrunError as exc:
            # The end is not in the first ``consumed`` bytes the reader holds: take them.
            message.add(await reader.read(exc.consumed))
            continue
        message.add(chunk[:-3])  # the CRLF before the dot ends the message's last line
        return message.result()


async def _read_opening(reader: asyncio.StreamReader, message: _Message) -> bool:
    """Read the first bytes in steps that cannot overrun the end, until what was read can no
    longer be the start of it (a message may be the end line alone, or a CRLF and then the
    end line); True if the message ended there. After that ``readuntil`` can find the end."""
    tail = b"\r\n"  # the message starts a line: its first line may be the end line
    held = b""  # read, not yet given to the message: it may belong to the end
    while matched := _end_prefix(tail):
        # No end can finish sooner than the one that would complete this partial match.
        piece = await reader.readexactly(len(_END) - matched)
        held += piece
        tail = (tail + piece)[-len(_END) :]
        if tail == _END:
            message.add(held[:-3])
            return True
        message.add(held[:-4])
        held = held[-4:]
    message.add(held)
    return False


def _end_prefix(tail: bytes) -> int:
    """How many of the end sequence's first bytes ``tail`` ends with (0 to 4)."""
    return next((n for n in (4, 3, 2, 1) if tail.endswith(_END[:n])), 0)


class _Message:
    """The raw message as it is read; once it is past the size limit, only what is needed to
    tell which refusal aiosmtpd would have sent."""

    def __init__(self, size_limit: int | None, line_limit: int) -> None:
        self.size_limit: float = size_limit or math.inf  # aiosmtpd: 0 or None is no limit
        self.line_limit = line_limit
        self.chunks: list[bytes] = []
        self.size = 0  # of the chunks
        self.settled = 0  # bytes of lines before the chunks, over no limit
        self.refusal: str | None = None

    def add(self, chunk: bytes) -> None:
        if self.refusal is None:
            self.chunks.append(chunk)
            self.size += len(chunk)
            if self.settled + self.size > self.size_limit:
                self._settle()

    def result(self) -> bytes | str:
        """The raw message or its refusal; call at the end, when the last line is complete."""
        if self.refusal is not None:
            return self.refusal
        # Within the size limit the only refusal is for a line too long.
        if self.size > self.line_limit and _longest_line(self.chunks) + 2 > self.line_limit:
            return TOO_LONG
        return _unstuffed(self.chunks)

    def _settle(self) -> None:
        """Past the size limit: aiosmtpd's refusal, unless it depends on how long the line
        still arriving turns out to be; then that line is kept (and the lines before it go)."""
        data = b"".join(self.chunks)
        self.chunks.clear()
        cut = data.rfind(b"\r\n")
        end = cut + 2 if cut >= 0 else 0
        self.refusal = self._first_refusal(data[:end].split(b"\r\n")[:-1], end)
        partial = data[end:]
        if self.refusal is None and len(partial) - 1 > self.line_limit:
            self.refusal = TOO_LONG  # whatever ends it, the line overruns the stream reader
        elif self.refusal is None:
            self.chunks.append(partial)
            self.size = len(partial)
            self.settled += end

    def _first_refusal(self, lines: list[bytes], size: int) -> str | None:
        """aiosmtpd's checks on complete lines (without their CRLF; ``size`` bytes with them)
        in its order: a line that overruns its stream reader before the line is counted, then
        the size, then its own check of the line's length."""
        counted = self.settled
        if _longest(lines) + 2 <= self.line_limit:
            return TOO_MUCH if counted + size > self.size_limit else None
        for line in lines:
            if len(line) > self.line_limit:
                return TOO_LONG
            counted += len(line) + 2
            if counted > self.size_limit:
                return TOO_MUCH
            if len(line) + 2 > self.line_limit:
                return TOO_LONG
        return None  # pragma: no cover (a line over the limit is among the lines)


def _longest(lines: list[bytes]) -> int:
    return max(map(len, lines), default=0)


def _longest_line(chunks: list[bytes]) -> int:
    """``_longest(b"".join(chunks).split(b"\r\n"))``, a chunk at a time: the lines of the whole
    message as a list took half as much memory again as the message."""
    longest = partial = 0  # ``partial``: the line still open after the chunks so far
    open_cr = False  # that line ends with a CR, which a LF next would end it with
    for chunk in chunks:
        if not chunk:
            continue
        lines = chunk.split(b"\r\n")
        if open_cr and chunk[0] == 0x0A:  # a CRLF across two chunks
            longest = max(longest, partial - 1)
            partial, lines[0] = 0, lines[0][1:]
        if len(lines) == 1:
            partial += len(lines[0])
        else:
            longest = max(longest, partial + len(lines[0]), _longest(lines[1:-1]))
            partial = len(lines[-1])
        open_cr = chunk[-1] == 0x0D and partial > 0
    return max(longest, partial)


def _unstuffed(chunks: list[bytes]) -> bytes:
    """The chunks joined without each line's leading dot (RFC 5321 §4.5.2 as aiosmtpd does it:
    the dot goes whatever follows it), emptying ``chunks`` as it goes. The message is written
    into one growing buffer while each chunk is let go once written, and the buffer becomes
    the result without a copy (``BytesIO.getvalue`` hands over its own bytes): about one copy
    of the message at its peak, plus one chunk."""
    out = io.BytesIO()
    chunks.reverse()  # taken from the end, so that each goes as soon as it is written
    tail = b"\r\n"  # the last two bytes before the chunk: the message starts a line
    while chunks:
        chunk = chunks.pop()
        if tail.endswith(b"\r\n") and chunk.startswith(b"."):
            piece = chunk[1:]  # a line starts the chunk
        elif tail.endswith(b"\r") and chunk.startswith(b"\n."):
            piece = b"\n" + chunk[2:]  # the chunk ends a CRLF and starts a line
        else:
            piece = chunk
        out.write(piece.replace(b"\r\n.", b"\r\n"))
        tail = chunk[-2:] if len(chunk) >= 2 else (tail + chunk)[-2:]
    return out.getvalue()
