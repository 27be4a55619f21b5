"""Reading a large request body (a JSON document, base64 inside it) with few copies of it.

orjson parses a body into a working copy of its own (and reserves about ten times the body's
size for its value tree) while the caller still holds the bytes: three copies at the peak. A
large body is parsed here instead, from text, by the standard library, after its bytes were let
go: at most two copies at once (the text and what is parsed from it). The outcome is orjson's
for every document (property-tested against it): the same values, and an error wherever orjson
raises one (not a number, infinity, an unpaired ``\\u`` surrogate, invalid UTF-8). One
difference is left: nesting deeper than Python's recursion limit (about 1,000 levels; orjson
takes 1,024) is an error here.

``decode_base64`` decodes an attachment's base64 text without the copies ``base64.b64decode``
makes (the text as bytes, the text without its line breaks).
"""

from __future__ import annotations

import binascii
import io
import json
import re
from dataclasses import dataclass
from typing import Any

_NON_ASCII = re.compile(rb"[\x80-\xff]+")
# Digits as "0", anything else as a space: a run of 19 digits is then found by ``in``, at the
# speed of a memory search (a regular expression for it takes seconds over 25 MB).
_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_INTEGER = b"0" * 19  # orjson reads an integer beyond 64 bits as a float
_SURROGATE = re.compile("[\ud800-\udfff]")
WINDOW = 1024 * 1024
_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1


class NotJson(ValueError):
    """The body is not a JSON document orjson would read."""


def large_body_text(body: bytearray) -> LargeText:
    """The body's text, all ASCII (what is not ASCII becomes a ``\\u`` escape, which is only
    valid inside a string, where it means the same character). Empties ``body`` as it goes,
    so that at most two copies are held."""
    long_integers = _holds_long_integer(body)
    if not body.isascii():
        try:
            escaped = _NON_ASCII.sub(_escaped, body)
        except UnicodeDecodeError as exc:
            raise NotJson(f"invalid UTF-8: {exc.reason}") from None
        body.clear()
        return LargeText(escaped.decode("ascii"), long_integers)
    text = body.decode("ascii")
    body.clear()
    return LargeText(text, long_integers)


@dataclass(frozen=True)
class LargeText:
    """A large body's text, and whether it has a run of digits too long for 64 bits."""

    text: str
    long_integers: bool

    @property
    def escapes(self) -> bool:
        """Whether the text has a backslash (one character: a search at memory speed)."""
        return "\\" in self.text


def _holds_long_integer(body: bytearray) -> bool:
    overlap = len(_LONG_INTEGER) - 1
    for start in range(0, len(body), WINDOW):
        if _LONG_INTEGER in body[start : start + WINDOW + overlap].translate(_DIGITS):
            return True
    return False


def _escaped(match: re.Match[bytes]) -> bytes:
    text = match.group().decode("utf-8")
    units = text.encode("utf-16-be")
    return b"".join(b"\\u%04x" % int.from_bytes(units[i : i + 2]) for i in range(0, len(units), 2))


def parse_large_json(body: LargeText) -> Any:
    """The document ``body`` holds, as ``orjson.loads`` reads it; ``NotJson`` where orjson
    would raise."""
    hooks: dict[str, Any] = {"parse_constant": _no_constant, "parse_float": _finite}
    if body.long_integers:
        hooks["parse_int"] = _integer
    try:
        value = json.loads(body.text, **hooks)
    except json.JSONDecodeError as exc:
        raise NotJson(str(exc)) from None
    except RecursionError:
        raise NotJson("nested too deeply") from None
    if body.escapes and _holds_surrogate(value):
        raise NotJson("a string holds an unpaired surrogate")
    return value


def _no_constant(name: str) -> Any:
    raise NotJson(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NotJson(f"the number {text} is infinite as a double")
    return value


def _integer(text: str) -> int | float:
    value = int(text)
    return value if _INT64_MIN <= value <= _UINT64_MAX else _finite(text)


def _holds_surrogate(value: Any) -> bool:
    """Whether a string of ``value`` (a key too) holds an unpaired surrogate; walked with a
    list, not recursion, as the document may nest as deep as the parser let it."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item) is not None:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


_WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "  # ASCII whitespace as ``str.split()`` sees it


def compact_length(text: str) -> int:
    """The length of ``text`` without its whitespace (what ``decode_base64`` decodes)."""
    if text.isascii():
        return len(text) - sum(text.count(space) for space in _WHITESPACE)
    return len("".join(text.split()))


def decode_base64(text: str) -> bytes:
    """``base64.b64decode("".join(text.split()), validate=True)``, holding only the text and
    the decoded bytes (and a window of ``WINDOW`` characters when the text has line breaks).
    Raises ``binascii.Error`` or ``ValueError`` as it does."""
    if not text.isascii():
        return binascii.a2b_base64("".join(text.split()), strict_mode=True)
    try:
        return binascii.a2b_base64(text, strict_mode=True)  # reads the text where it is
    except binascii.Error:
        pass  # whitespace (refused in strict mode), or not base64: read without whitespace
    out = io.BytesIO()
    carry = ""  # the last quartet (whole or not) so far, or all from its start on if padded
    for start in range(0, len(text), WINDOW):
        piece = carry + "".join(text[start : start + WINDOW].split())
        padding = piece.find("=")
        end = len(piece) if padding < 0 else padding
        # The last quartet before the end stays, whole or not: padding after a whole one
        # ("AAAA=", here or in a later window) is accepted with it and refused alone ("=").
        cut = max(0, end - (end % 4 or 4))
        out.write(binascii.a2b_base64(piece[:cut], strict_mode=True))
        carry = piece[cut:]
    out.write(binascii.a2b_base64(carry, strict_mode=True))
    return out.getvalue()  # BytesIO's own buffer, not a copy
