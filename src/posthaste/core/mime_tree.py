"""A message's MIME tree, built from its bytes by finding lines, not reading each one.

``parse_message`` (the stdlib's parser) reads a message one line at a time in Python: for the
relay's 2.3 KB text-and-html benchmark message that was ~90 µs, about a tenth of the relay's
CPU per message. ``read_tree`` finds the header block, the body and the multipart boundary
lines with ``bytes.find`` and builds the same tree the stdlib's parser builds with the same
policy: ``email.message.Message`` objects (``EmailMessage`` for ``policy.default``), each header
stored with ``set_raw`` exactly as ``header_source_parse`` stores it, each leaf's payload the
same ``str`` (surrogate escapes for 8-bit bytes), with the line end before a boundary belonging
to the boundary (RFC 2046). It works by offsets over the one ``bytes`` object and decodes only
what the tree keeps, once: a large attachment is one copy in memory, whatever its depth (the
stdlib's parser holds its lines and their join). Everything read from the tree afterwards
(content types, parameters) is the stdlib's own code; ``decoded_payload`` decodes well-formed
base64 without the stdlib's copies.

It builds only what well-formed mail looks like: header fields ``name: value`` with folded
continuations and a blank line before the body; multipart bodies (nested too) whose parts sit
between boundary lines, closed by the close delimiter; LF or CRLF line ends. For anything else
(a bare CR, a malformed header line, a missing boundary or close delimiter, consecutive
boundary lines, ``message/*`` and ``multipart/digest`` parts, which the stdlib parses further)
it returns ``None`` and the caller uses ``parse_message``; tests/unit/test_mime_tree.py checks
the two against each other on generated messages.
"""

from __future__ import annotations

import binascii
import itertools
import re
from collections.abc import Callable
from email.message import Message
from email.policy import Policy, compat32
from typing import Any

from posthaste.core import mime_params

__all__ = ["decoded_payload", "decoded_size", "read_tree"]

_BARE_CR = re.compile(rb"\r(?!\n)")
# What the stdlib's parser takes for a header line: a name (printable ASCII but ':') and ':'.
_HEADER_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]+:")
# After ``--boundary`` on a boundary line (the stdlib parser's pattern, past its separator).
_AFTER_SEPARATOR = re.compile(rb"(?P<end>--)?[ \t]*(?:\r\n|\r|\n)?$")
_DEPTH = 20  # deeper nesting than real mail has: leave it to the stdlib
_MULTIPART_CTES = ("7bit", "8bit", "binary")  # RFC 2045 6.4
_BASE64_LINES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/\r\n"
_WINDOW = 1024 * 1024


def read_tree(
    raw: bytes, policy: Policy = compat32, *, unread: Callable[[Message], bool] | None = None
) -> Message | None:
    """The tree of ``raw``, or ``None`` when it is not of the shapes handled here. Its messages
    are the ``policy``'s, as the stdlib parser's with that policy (``EmailMessage`` for
    ``policy.default``).

    A leaf for which ``unread`` is true (asked with its header fields set) and whose payload is
    well-formed base64 is left unread: its payload is empty, ``decoded_size`` counts its bytes
    from the message's and ``decoded_payload`` decodes them from where they are in ``raw``. A
    reader that needs only an attachment's size (received mail) then never holds a copy of it,
    and one that needs its bytes (the relay) holds them but never the base64 text."""
    if b"\r" in raw and _BARE_CR.search(raw):
        return None  # the stdlib's parser ends lines at a bare CR too
    return _entity(_Reader(raw, policy, unread), 0, len(raw), 0)


# Each step reads ``raw[start:end]`` by its offsets, and only what the tree keeps is decoded
# (as the stdlib's parser decodes the whole message: ASCII, 8-bit bytes as surrogate escapes),
# each piece once: a large attachment is one copy in the tree, whatever its depth.


class _Reader:
    """The message's bytes and the policy its tree is made with."""

    def __init__(
        self, raw: bytes, policy: Policy, unread: Callable[[Message], bool] | None = None
    ) -> None:
        self.raw = raw
        self.view = memoryview(raw)
        self.policy = policy
        self.factory = policy.message_factory or Message
        self.unread = unread

    def text(self, start: int, end: int) -> str:
        return str(self.view[start:end], "ascii", "surrogateescape")


def _entity(reader: _Reader, start: int, end: int, depth: int) -> Message | None:
    """A message (depth 0) or a part of a multipart: the line end before the boundary that
    follows a part is the boundary's, not the part's payload's (or its epilogue's)."""
    raw = reader.raw
    split = _headers(raw, start, end)
    if split is None:
        return None
    fields, body = split
    message: Message = reader.factory(policy=reader.policy)
    for name, value in fields:
        message.set_raw(name, value)
    content_type = message.get_content_type()  # read once: each read walks the fields
    maintype = content_type.split("/")[0]  # get_content_maintype()
    if maintype == "message":
        return None
    if maintype != "multipart":
        stop = _without_line_end(raw, body, end) if depth else end
        size = _unread_size(reader, message, body, stop)
        if size is None:
            message.set_payload(reader.text(body, stop))
        else:
            message.set_payload("")
            message.__dict__[_UNREAD_SIZE] = size
            message.__dict__[_UNREAD_SPAN] = (raw, body, stop)
        return message
    return _multipart(reader, message, content_type, body, end, depth)


def _multipart(
    reader: _Reader, message: Message, content_type: str, start: int, end: int, depth: int
) -> Message | None:
    raw = reader.raw
    boundary = mime_params.boundary(message)
    if not boundary or depth >= _DEPTH or content_type.split("/")[1] == "digest":
        return None
    if str(message.get("content-transfer-encoding", "8bit")).lower() not in _MULTIPART_CTES:
        return None  # the stdlib records a defect for it
    try:
        separator = ("--" + boundary).encode("ascii", "surrogateescape")
    except UnicodeEncodeError:
        return None  # no line of the message can start with it
    lines = _separator_lines(raw, start, end, separator)
    if not _well_formed(lines):
        return None
    children: list[Message | str] = []
    for (_, after, _), (before, _, _) in itertools.pairwise(lines):
        child = _entity(reader, after, before, depth + 1)
        if child is None:
            return None
        children.append(child)
    first, (_, last, _) = lines[0][0], lines[-1]
    message.preamble = (
        reader.text(start, _without_line_end(raw, start, first)) if first > start else None
    )
    if not depth:
        message.epilogue = reader.text(last, end)
    else:
        message.epilogue = (
            reader.text(last, _without_line_end(raw, last, end)) if end > last else None
        )
    message.set_payload(children)
    return message


def _headers(raw: bytes, start: int, end: int) -> tuple[list[tuple[str, str]], int] | None:
    """The header fields of ``raw[start:end]`` as ``(name, value)`` the way compat32 stores
    them, and where the body starts."""
    fields: list[tuple[str, str]] = []
    position = start
    body = end
    while position < end:
        stop = raw.find(b"\n", position, end)
        stop = end if stop < 0 else stop + 1
        line = raw[position:stop].decode("ascii", "surrogateescape")
        if line in ("\r\n", "\n"):
            body = stop
            break
        if line[0] in " \t":
            if not fields:
                return None
            name, value = fields[-1]
            fields[-1] = (name, value + line)
        else:
            match = _HEADER_NAME.match(line)
            if match is None:
                return None
            fields.append((line[: match.end() - 1], line[match.end() :].lstrip(" \t")))
        position = stop
    return [(name, value.rstrip("\r\n")) for name, value in fields], body


def _well_formed(lines: list[tuple[int, int, bool]]) -> bool:
    """Boundary lines of a multipart body the way it is read here: a boundary first, one close
    delimiter, last, and a part (however empty) between each two."""
    if not lines or lines[0][2] or not lines[-1][2]:
        return False  # no boundary, a close delimiter first, or none at the end
    if sum(close for _, _, close in lines) != 1:
        return False  # after the close delimiter, the stdlib reads on as epilogue
    # Consecutive boundary lines: the stdlib skips them.
    return all(after != before for (_, after, _), (before, _, _) in itertools.pairwise(lines))


def _separator_lines(
    raw: bytes, start: int, end: int, separator: bytes
) -> list[tuple[int, int, bool]]:
    """``(start, end, is_close)`` of each boundary line (``end`` past its line end)."""
    found: list[tuple[int, int, bool]] = []
    position = raw.find(separator, start, end)
    while position >= 0:
        stop = raw.find(b"\n", position, end)
        stop = end if stop < 0 else stop + 1
        if position == start or raw[position - 1] == 0x0A:  # \n
            match = _AFTER_SEPARATOR.match(raw, position + len(separator), stop)
            if match is not None:
                found.append((position, stop, match.group("end") is not None))
        position = raw.find(separator, stop, end)
    return found


def _without_line_end(raw: bytes, start: int, end: int) -> int:
    """Where ``raw[start:end]`` ends without its last line end."""
    if end - start >= 2 and raw.startswith(b"\r\n", end - 2):
        return end - 2
    return end - 1 if end > start and raw[end - 1] in b"\r\n" else end


def decoded_payload(part: Message) -> bytes | None:
    """What ``part.get_payload(decode=True)`` returns. A well-formed base64 payload (lines of
    the alphabet, padding only at its end) is decoded where it is: the stdlib encodes it to
    bytes, splits it into lines and joins them before decoding, four copies of an attachment
    in memory at once besides the one the part holds. A leaf ``read_tree`` left unread is
    decoded from the message's bytes, where they are."""
    span = part.__dict__.get(_UNREAD_SPAN)
    if isinstance(span, tuple):
        raw, start, end = span
        return binascii.a2b_base64(memoryview(raw)[start:end])
    payload = _payload(part)
    if isinstance(payload, str) and _plain_base64(part, payload) is not None:
        return binascii.a2b_base64(payload)
    data = part.get_payload(decode=True)
    return data if isinstance(data, bytes) else None


def decoded_size(part: Message) -> int:
    """``len(decoded_payload(part) or b"")``, counted without decoding well-formed base64; for
    a leaf ``read_tree`` left unread, the size its payload had."""
    unread = part.__dict__.get(_UNREAD_SIZE)
    if isinstance(unread, int):
        return unread
    payload = _payload(part)
    digits = _plain_base64(part, payload) if isinstance(payload, str) else None
    if digits is None or not isinstance(payload, str):
        return len(decoded_payload(part) or b"")
    return digits // 4 * 3 - payload.count("=", -8)


def _payload(part: Message) -> object:
    """The payload as the part holds it. ``get_payload()`` checks a ``str`` for surrogates by
    encoding all of it to UTF-8 (one more copy of an attachment, let go at once)."""
    return part.__dict__.get("_payload")


# On a leaf read_tree left unread: its decoded size, and its base64 as (message, start, end).
_UNREAD_SIZE = "_posthaste_unread_size"
_UNREAD_SPAN = "_posthaste_unread_span"


def _unread_size(reader: _Reader, part: Message, start: int, end: int) -> int | None:
    """The decoded size of the payload ``raw[start:end]`` if the leaf is to be left unread
    (``decoded_size`` of the payload, counted on the message's bytes, no copy of them)."""
    if reader.unread is None or not reader.unread(part) or not _is_base64(part):
        return None
    raw = reader.raw
    digits = _base64_digits(raw, start, end)
    if digits is None:
        return None
    return digits // 4 * 3 - raw.count(b"=", max(start, end - 8), end)


def _plain_base64(part: Message, payload: str) -> int | None:
    """How many base64 characters (padding included) the payload has (``_base64_digits``)."""
    return _base64_digits(payload, 0, len(payload)) if _is_base64(part) else None


def _is_base64(part: Message) -> bool:
    return str(part.get("content-transfer-encoding", "")).lower() == "base64"


def _base64_digits(text: str | bytes, start: int, end: int) -> int | None:
    """How many base64 characters (padding included) ``text[start:end]`` has, when it is base64
    that the stdlib's ``decode_b`` takes at its first, strict try, without a defect: only the
    alphabet between line ends, at most two ``=`` at the end, whole quadruples. Read where it
    is, a window at a time: a part's text, or its span of the message's bytes."""
    held: Any = text  # str or bytes alike: the marks below are of its type
    marks: Any = ("=", "\r", "\n") if isinstance(text, str) else (b"=", b"\r", b"\n")
    pad, cr, lf = marks
    found = held.find(pad, start, end)
    body = end if found < 0 else found
    tail = held[body:end]
    if len(tail) > 8 or tail.count(pad) > 2 or tail.strip(pad + cr + lf):
        return None
    for first in range(start, body, _WINDOW):
        window = held[first : min(first + _WINDOW, body)]
        if isinstance(window, str):
            if not window.isascii():
                return None
            window = window.encode("ascii")
        if window.translate(None, _BASE64_LINES):
            return None
    digits = end - start - held.count(cr, start, end) - held.count(lf, start, end)
    return digits if digits % 4 == 0 else None
