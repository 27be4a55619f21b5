"""Describing rejected input in error messages, shared by the address and header validators."""

from __future__ import annotations

import unicodedata

SHOWN_LIMIT = 80
_CONTROL_NAMES = {"\r": "CR", "\n": "LF", "\x00": "NUL", "\t": "TAB"}
_JSON_TYPE_NAMES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    dict: "object",
    list: "array",
    type(None): "null",
}


def describe_character(char: str) -> str:
    """Name a forbidden character: "a control character (CR)", "a line separator (U+2028)"."""
    category = unicodedata.category(char)
    if category == "Cs":
        return f"an unpaired surrogate (U+{ord(char):04X})"
    if category in ("Zl", "Zp"):
        return f"a line separator (U+{ord(char):04X})"
    return f"a control character ({_CONTROL_NAMES.get(char, f'U+{ord(char):04X}')})"


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type ("string", "number", "object", ...)."""
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def shorten(text: str) -> str:
    """At most SHOWN_LIMIT characters, with an ellipsis when cut."""
    return text if len(text) <= SHOWN_LIMIT else text[:SHOWN_LIMIT] + "…"
