"""The pipelined group's own reply reader and DATA bytes, against aiosmtplib's: the same replies
from any split of the server's bytes into reads, the same bytes after DATA for any message."""

from __future__ import annotations

import asyncio

from aiosmtplib.protocol import PERIOD_REGEX, normalize_message_line_endings
from hypothesis import given
from hypothesis import strategies as st

from posthaste.adapters.smtp_pipelining import _Replies, message_bytes

_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
_REPLY = st.tuples(st.integers(200, 599), st.lists(_TEXT, min_size=1, max_size=4))


def _wire(code: int, lines: list[str]) -> bytes:
    """A reply as a server writes it: ``code-text`` lines, the last ``code text``."""
    out = [f"{code}-{line}" for line in lines[:-1]] + [f"{code} {lines[-1]}"]
    return "".join(f"{line}\r\n" for line in out).encode()


def _expected(code: int, lines: list[str]) -> tuple[int, str]:
    """What aiosmtplib makes of it: each line's text stripped, joined by newlines."""
    return code, "\n".join(line.strip(" \t") for line in lines)


@given(st.lists(_REPLY, min_size=1, max_size=6), st.lists(st.integers(1, 40), max_size=20))
def test_every_reply_is_read_whatever_the_reads(
    replies: list[tuple[int, list[str]]], cuts: list[int]
) -> None:
    data = b"".join(_wire(code, lines) for code, lines in replies)
    reader = _Replies()
    offset = 0
    for size in [*cuts, len(data)]:
        reader.data_received(data[offset : offset + size])
        offset += size

    async def read_all() -> list[tuple[int, str]]:
        return [tuple(await reader.next(1.0)) for _ in replies]  # type: ignore[misc]

    assert asyncio.run(read_all()) == [_expected(code, lines) for code, lines in replies]


def test_a_connection_lost_before_a_reply_fails_the_read() -> None:
    reader = _Replies()
    reader.data_received(b"250 2.1.0 OK\r\n354 ")
    reader.connection_lost(None)

    async def read_two() -> None:
        assert tuple(await reader.next(1.0)) == (250, "2.1.0 OK")
        await reader.next(1.0)

    try:
        asyncio.run(read_two())
    except Exception as exc:
        assert "Connection lost" in str(exc)
    else:
        raise AssertionError("the second read should fail")


@given(
    st.binary(max_size=200)
    | st.lists(st.sampled_from([b".", b"\r", b"\n", b"a", b" "])).map(b"".join)
)
def test_data_bytes_are_aiosmtplibs(raw: bytes) -> None:
    expected = PERIOD_REGEX.sub(b"..", normalize_message_line_endings(raw)) + b".\r\n"
    assert message_bytes(raw) == expected
