"""A submitted message's MIME tree, built from its text by finding lines, not reading each one.

``parse_message`` (the stdlib's parser) reads a message one line at a time in Python: for the
relay's 2.3 KB text-and-html benchmark message that was ~90 µs, about a tenth of the relay's
CPU per message. ``read_tree`` finds the header block, the body and the multipart boundary
lines with ``str.find`` and builds the same tree the stdlib's parser builds: compat32
``email.message.Message`` objects, each header stored with ``set_raw`` exactly as
``compat32.header_source_parse`` stores it, each leaf's payload the same ``str`` (surrogate
escapes for 8-bit bytes), with the line end before a boundary belonging to the boundary (RFC
2046). Everything read from the tree afterwards (content types, parameters, decoding) is the
stdlib's own code.

It builds only what well-formed mail looks like: header fields ``name: value`` with folded
continuations and a blank line before the body; multipart bodies (nested too) whose parts sit
between boundary lines, closed by the close delimiter; LF or CRLF line ends. For anything else
(a bare CR, a malformed header line, a missing boundary or close delimiter, consecutive
boundary lines, ``message/*`` and ``multipart/digest`` parts, which the stdlib parses further)
it returns ``None`` and the caller uses ``parse_message``; tests/unit/test_mime_tree.py checks
the two against each other on generated messages.
"""

from __future__ import annotations

import itertools
import re
from email.message import Message

from posthaste.core import mime_params

__all__ = ["read_tree"]

_BARE_CR = re.compile(r"\r(?!\n)")
# What the stdlib's parser takes for a header line: a name (printable ASCII but ':') and ':'.
_HEADER_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]+:")
# After ``--boundary`` on a boundary line (the stdlib parser's pattern, past its separator).
_AFTER_SEPARATOR = re.compile(r"(?P<end>--)?[ \t]*(?:\r\n|\r|\n)?$")
_DEPTH = 20  # deeper nesting than real mail has: leave it to the stdlib
_MULTIPART_CTES = ("7bit", "8bit", "binary")  # RFC 2045 6.4


def read_tree(text: str) -> Message | None:
    """The tree of ``text`` (the message decoded as ASCII with surrogate escapes), or ``None``
    when it is not of the shapes handled here."""
    if "\r" in text and _BARE_CR.search(text):
        return None  # the stdlib's parser ends lines at a bare CR too
    return _entity(text, 0)


def _entity(text: str, depth: int) -> Message | None:
    """A message (depth 0) or a part of a multipart: the line end before the boundary that
    follows a part is the boundary's, not the part's payload's (or its epilogue's)."""
    split = _headers(text)
    if split is None:
        return None
    fields, body = split
    message = Message()
    for name, value in fields:
        message.set_raw(name, value)
    maintype = message.get_content_maintype()
    if maintype == "message":
        return None
    if maintype != "multipart":
        message.set_payload(_without_line_end(body) if depth else body)
        return message
    return _multipart(message, body, depth)


def _multipart(message: Message, body: str, depth: int) -> Message | None:
    boundary = mime_params.boundary(message)
    if not boundary or depth >= _DEPTH or message.get_content_subtype() == "digest":
        return None
    if str(message.get("content-transfer-encoding", "8bit")).lower() not in _MULTIPART_CTES:
        return None  # the stdlib records a defect for it
    parts = _parts(body, "--" + boundary)
    if parts is None:
        return None
    preamble, texts, epilogue = parts
    children: list[Message | str] = []
    for part_text in texts:
        child = _entity(part_text, depth + 1)
        if child is None:
            return None
        children.append(child)
    message.preamble = preamble
    message.epilogue = (_without_line_end(epilogue) if epilogue else None) if depth else epilogue
    message.set_payload(children)
    return message


def _headers(text: str) -> tuple[list[tuple[str, str]], str] | None:
    """The header fields as ``(name, value)`` the way compat32 stores them, and the body."""
    fields: list[tuple[str, str]] = []
    position, size = 0, len(text)
    body = ""
    while position < size:
        end = text.find("\n", position)
        end = size if end < 0 else end + 1
        line = text[position:end]
        if line in ("\r\n", "\n"):
            body = text[end:]
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
        position = end
    return [(name, value.rstrip("\r\n")) for name, value in fields], body


def _parts(body: str, separator: str) -> tuple[str | None, list[str], str] | None:
    """Preamble, part texts and epilogue of a multipart body; None unless well formed."""
    lines = _separator_lines(body, separator)
    if not lines or lines[0][2] or not lines[-1][2]:
        return None  # no boundary, a close delimiter first, or none at the end
    closes = [start for start, _, close in lines if close]
    if len(closes) != 1:
        return None  # after the close delimiter, the stdlib reads on as epilogue
    texts: list[str] = []
    for (_, after, _), (start, _, _) in itertools.pairwise(lines):
        if start == after:
            return None  # consecutive boundary lines: the stdlib skips them
        texts.append(body[after:start])
    first = lines[0][0]
    preamble = _without_line_end(body[:first]) if first else None
    return preamble, texts, body[lines[-1][1] :]


def _separator_lines(body: str, separator: str) -> list[tuple[int, int, bool]]:
    """``(start, end, is_close)`` of each boundary line (``end`` past its line end)."""
    found: list[tuple[int, int, bool]] = []
    position = body.find(separator)
    while position >= 0:
        end = body.find("\n", position)
        end = len(body) if end < 0 else end + 1
        if position == 0 or body[position - 1] == "\n":
            match = _AFTER_SEPARATOR.match(body[position:end], len(separator))
            if match is not None:
                found.append((position, end, match.group("end") is not None))
        position = body.find(separator, end)
    return found


def _without_line_end(text: str | None) -> str:
    if not text:
        return ""
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text[-1] in "\r\n" else text
