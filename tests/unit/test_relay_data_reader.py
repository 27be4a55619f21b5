"""The relay's DATA, read in chunks, agrees with aiosmtpd's line-by-line DATA on any byte stream:
the same replies, the same content handed to the handler, the same state afterwards.

Both servers talk over an in-memory transport fed in given pieces, so where the stream is cut
(a terminator split in two, a CRLF split in two) is chosen by the test, not by the kernel. The
line limit is small so that long lines and the size limit are cheap to reach.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session
from hypothesis import given
from hypothesis import strategies as st

from posthaste.smtp.data import _longest_line, _unstuffed, read_message
from posthaste.smtp.relay import RelaySMTP
from posthaste.smtp.replies import ENHANCED

LINE_LIMIT = 24
OPENING = b"HELO t\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<d@e.f>\r\nDATA\r\n"
AGAIN = b"MAIL FROM:<a@b.c>\r\nRCPT TO:<d@e.f>\r\nDATA\r\nnext\r\n.\r\nQUIT\r\n"


class AiosmtpdServer(SMTP):
    line_length_limit = LINE_LIMIT


class RelayServer(RelaySMTP):
    line_length_limit = LINE_LIMIT


class Recorder:
    """A handler that keeps what DATA gave it."""

    def __init__(self) -> None:
        self.messages: list[tuple[object, object]] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.messages.append((envelope.content, envelope.original_content))
        return f"250 Kept {len(self.messages)}"


class Wire(asyncio.Transport):
    """The server's side of a connection: what it writes is kept; closing it ends the session."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.protocol: SMTP | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 2525) if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed and self.protocol is not None:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _settle() -> None:
    for _ in range(50):  # enough turns of the loop for the session to act on what it has
        await asyncio.sleep(0)


async def _converse(
    server: type[SMTP], pieces: list[bytes], **options: Any
) -> tuple[list[str], list[tuple[object, object]]]:
    """Feed ``pieces`` to a fresh session one at a time; its replies and the handler's record."""
    recorder = Recorder()
    if issubclass(server, RelaySMTP):
        session: SMTP = server(recorder, set(), False, **options)  # type: ignore[arg-type]
    else:
        session = server(recorder, **options)
    wire = Wire()
    wire.protocol = session
    session.connection_made(wire)
    await _settle()
    for piece in pieces:
        if wire.closed:
            break
        session.data_received(piece)
        await _settle()
    wire.close()
    await _settle()
    replies = bytes(wire.written).decode("utf-8", "replace").split("\r\n")
    return [ENHANCED.get(reply, reply) for reply in replies], recorder.messages


async def _both(pieces: list[bytes], **options: Any) -> None:
    options = {"hostname": "t", "ident": "i", **options}
    expected = await _converse(AiosmtpdServer, pieces, **options)
    assert await _converse(RelayServer, pieces, **options) == expected


def _agree(stream: bytes, cuts: list[int] | None = None, **options: Any) -> None:
    ends = sorted({c % (len(stream) + 1) for c in cuts or []} | {len(stream)})
    pieces = [stream[a:b] for a, b in zip([0, *ends], ends, strict=False) if b > a]
    asyncio.run(_both(pieces, **options))


TOKENS = st.sampled_from(
    [
        *(b"a", b"xyz", b"x" * 11, b"\xc3\xa9", b"\xff"),  # text
        *(b".", b"..", b"\r\n", b"\r", b"\n"),  # what lines and their dots are made of
        *(b"\r\n.", b"\r\n.\r", b"\r\n.\r\n", b"\r\n..\r\n"),  # near ends, and an end
    ]
)


@given(
    body=st.lists(TOKENS, max_size=40).map(b"".join),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    size_limit=st.sampled_from([0, 1, 10, 40, 100]),
    decoding=st.sampled_from([{}, {"decode_data": True}, {"enable_SMTPUTF8": True}]),
)
def test_any_stream_gets_what_aiosmtpd_gives(
    body: bytes, cuts: list[int], size_limit: int, decoding: dict[str, bool]
) -> None:
    stream = OPENING + body + b"\r\n.\r\n" + AGAIN
    _agree(stream, cuts, data_size_limit=size_limit, **decoding)


@pytest.mark.parametrize(
    ("body", "size_limit"),
    [
        (b".", 0),  # the message is the end line alone: empty
        (b"\r\n", 0),  # one empty line
        (b"..", 0),  # a line that is only "..": "."
        (b"..a\r\n.b\r\n...", 0),  # every line's leading dot goes
        (b"a\r\n.\rb\r\n.\nc", 0),  # "\r\n.\r" and "\r\n.\n" end nothing
        (b"a\nb\r\n.\nmore\r\n", 0),  # a bare LF ends no line
        (b"x" * 22, 0),  # a line at the line limit
        (b"x" * 23, 0),  # one byte over: 500, after the whole message
        (b"x" * 60 + b"\r\n" + b"y" * 8, 0),  # far over: the stream reader's overrun
        (b"abc\r\nde", 9),  # exactly the size limit (the CRLF before the dot counts)
        (b"abc\r\ndef", 9),  # one byte over: 552
        (b"..c\r\nde", 9),  # the size counts the dots as sent
        (b"ab\r\n" + b"x" * 24, 10),  # the line that crosses the size is also too long: 552
        (b"ab\r\n" + b"x" * 25, 10),  # ... too long for the stream reader: 500
        (b"abc\r\nde\r\n" + b"x" * 30, 9),  # ... after lines of exactly the size: 500
        (b"x" * 23 + b"\r\nabcdefgh", 30),  # too long before over the size: 500
        (b"x" * 30 + b"\r\n" + b"y" * 200, 10),  # the same, on the stream reader: 500
        (b"abcdefgh\r\n" + b"x" * 30 + b"\r\nyy", 10),  # the same, after exactly the size
        (b"abcdefghijkl\r\n" * 2 + b"x" * 24 + b"\r\nz", 30),  # a chunk ends in its CRLF: 552
        (b"ab\rc.\r\nd", 0),  # a line ending in a dot early on
    ],
)
def test_the_edges(body: bytes, size_limit: int) -> None:
    stream = OPENING + body + b"\r\n.\r\n" + AGAIN
    for cuts in ([], list(range(len(stream)))):  # whole, and one byte at a time
        _agree(stream, cuts, data_size_limit=size_limit)


def test_a_connection_lost_in_data_hands_nothing_over() -> None:
    async def lost(server: type[SMTP]) -> tuple[list[str], list[tuple[object, object]]]:
        return await _converse(server, [OPENING, b"Subject: x\r\n\r\nhalf a message\r\n."])

    replies, messages = asyncio.run(lost(RelayServer))
    assert replies[-2].startswith("354") and messages == []
    assert asyncio.run(lost(AiosmtpdServer)) == (replies, messages)


async def test_what_follows_the_end_line_stays_for_the_next_command() -> None:
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    reader.feed_data(b"..a\r\n" + b"b" * 5000 + b"\r\n.\r\nQUIT\r\n")
    assert await read_message(reader, 10_000, 6000) == b".a\r\n" + b"b" * 5000 + b"\r\n"
    assert await reader.readuntil(b"\r\n") == b"QUIT\r\n"


def unstuff(raw: bytes) -> bytes:
    """RFC 5321 §4.5.2 as aiosmtpd does it, on the whole message at once."""
    content = raw.replace(b"\r\n.", b"\r\n")
    return content[1:] if content.startswith(b".") else content


def test_unstuffing() -> None:
    assert _unstuffed([b"..\r\n.a\r\nb.\r\n..c\r\n"]) == b".\r\na\r\nb.\r\n.c\r\n"
    assert (
        _unstuffed([b"a\r", b"\n.", b"b\r\n", b".", b".\r\n", b"\r", b"\n"])
        == b"a\r\nb\r\n.\r\n\r\n"
    )
    assert _unstuffed([]) == b""


@given(
    data=st.lists(st.sampled_from([b"a", b".", b"\r", b"\n", b"\r\n."]), max_size=30).map(b"".join),
    cuts=st.lists(st.integers(0, 60), max_size=8),
)
def test_unstuffing_a_chunk_at_a_time_is_unstuffing_the_whole(data: bytes, cuts: list[int]) -> None:
    edges = [0, *sorted(min(cut, len(data)) for cut in cuts), len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(edges)]
    assert _unstuffed(chunks) == unstuff(data)
    assert chunks == []  # each chunk let go once written


@given(
    data=st.binary(max_size=60).map(lambda b: b.replace(b"x", b"\r").replace(b"y", b"\n")),
    cuts=st.lists(st.integers(0, 60), max_size=5),
)
def test_the_longest_line_is_found_a_chunk_at_a_time(data: bytes, cuts: list[int]) -> None:
    edges = [0, *sorted(min(cut, len(data)) for cut in cuts), len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(edges)]
    assert _longest_line(chunks) == max(map(len, data.split(b"\r\n")))
