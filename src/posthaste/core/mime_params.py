"""A part's ``boundary`` and ``charset`` parameters, read without the stdlib's parameter parser
for the Content-Type fields nearly every message has.

``Message.get_boundary()`` and ``get_content_charset()`` split the whole field on ``;`` with
quote counting, decode RFC 2231 continuations, quote and unquote each value twice: ~10 µs a
call, about a tenth of reading a relay submission. A field of the usual shape, ``type/subtype``
then ``; name=token`` or ``; name="text"`` parameters (no RFC 2231 ``*`` names, no backslash,
quote or angle bracket inside a quoted value, printable ASCII), is read here with one regular
expression and gives what those methods give; anything else is left to them
(tests/unit/test_mime_params.py checks the two against each other on generated fields).
"""

from __future__ import annotations

import re
from email.message import Message

__all__ = ["boundary", "charset"]

_TOKEN = r"[!#$%&'+.^_`|~0-9A-Za-z-]+"  # RFC 2045's token, without '*' (RFC 2231's marker)
_VALUE = rf'(?:{_TOKEN}|"[\x20\x21\x23-\x3b\x3d\x3f-\x5b\x5d-\x7e]*")'  # no '"', '<', '>', '\'
_SPACE = r"[ \t\r\n]*"  # folding included: compat32 keeps a field's line breaks in its value
_FIELD = re.compile(
    rf"{_SPACE}{_TOKEN}/{_TOKEN}{_SPACE}((?:;{_SPACE}{_TOKEN}={_VALUE}{_SPACE})*);?{_SPACE}"
)
_PARAM = re.compile(rf"({_TOKEN})=({_VALUE})")


def boundary(message: Message) -> str | None:
    """``message.get_boundary()``."""
    params = _params(message)
    if params is None:
        return message.get_boundary()
    value = params.get("boundary")
    return None if value is None else value.rstrip()


def charset(message: Message, failobj: str) -> str:
    """``message.get_content_charset(failobj)``."""
    params = _params(message)
    if params is None:
        return str(message.get_content_charset(failobj))
    value = params.get("charset")
    return failobj if value is None else value.lower()


def _params(message: Message) -> dict[str, str] | None:
    """The Content-Type's parameters (names lowercased, the first of a name kept, values
    unquoted); ``{}`` without the field, None when the field is not of the usual shape."""
    field = message.get("content-type")
    if field is None:
        return {}
    if not isinstance(field, str):  # a Header: the field has 8-bit bytes
        return None
    match = _FIELD.fullmatch(field)
    if match is None:
        return None
    params: dict[str, str] = {}
    for name, value in _PARAM.findall(match.group(1)):
        params.setdefault(name.lower(), value[1:-1] if value.startswith('"') else value)
    return params
