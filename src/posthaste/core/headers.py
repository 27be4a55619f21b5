"""Caller-supplied header fields of a send request: custom ``headers``, ``subject`` and ``tags``.

Decisions:

- ``RESERVED_HEADERS`` are the fields the service writes itself; setting them through ``headers``
  is refused with a message naming the request field to use instead. Also refused: any name
  starting ``X-Posthaste-`` (the relay's control headers; ``tags`` and ``stream_id`` carry them).
- Allowed on purpose: ``List-Unsubscribe`` and ``List-Unsubscribe-Post`` (a caller may run its own
  unsubscribe endpoint), ``In-Reply-To`` and ``References`` (threading), ``X-*`` and the rest.
- Header names differing only in case are one header, so giving both is refused.
- A value may hold any text but no control character other than TAB, and no U+2028/U+2029:
  CR, LF and NUL are header injection, the rest cannot be written safely. Non-ASCII is allowed;
  the MIME builder encodes it (RFC 2047). ``Name: value`` must fit one 998-character line.
- ``subject`` follows the same character rule and is at most 2,000 characters: it is RFC 2047
  encoded and folded over several lines, so the 998-character line limit does not bind it, but
  a bound keeps raw messages and list views sane. Validate the rendered subject too.
- ``tags``: an object of names to string values (SPEC) or Resend's ``[{"name", "value"}]`` list.
  Names are 1 to 256 ASCII letters, digits, ``_`` or ``-`` (Resend's rule); values are strings of
  at most 256 characters, possibly empty, never numbers or booleans. At most 50 tags.
- ``None`` (the field omitted or ``null``) gives an empty ``headers`` or ``tags`` mapping.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

from posthaste.core.text import describe_character, json_type, shorten
from posthaste.errors import ValidationError

MAX_CUSTOM_HEADERS = 50
MAX_HEADER_LINE_LENGTH = 998
MAX_SUBJECT_LENGTH = 2000
MAX_TAGS = 50
MAX_TAG_VALUE_LENGTH = 256

_SERVICE_SETS_IT = "the service sets it"
_MIME_IS_BUILT = "the service builds the MIME structure from 'html', 'text' and 'attachments'"

# Lowercased name → what the caller should do instead.
_RESERVED_GUIDANCE: dict[str, str] = {
    "from": "use the 'from' field",
    "to": "use the 'to' field",
    "cc": "use the 'cc' field",
    "bcc": "use the 'bcc' field",
    "reply-to": "use the 'reply_to' field",
    "subject": "use the 'subject' field",
    "sender": f"{_SERVICE_SETS_IT} from the 'from' field",
    "date": f"{_SERVICE_SETS_IT} when the email is sent; use 'scheduled_at' to send later",
    "message-id": f"{_SERVICE_SETS_IT} and returns it as 'message_id'",
    "mime-version": _MIME_IS_BUILT,
    "content-type": _MIME_IS_BUILT,
    "content-transfer-encoding": _MIME_IS_BUILT,
    "content-disposition": _MIME_IS_BUILT,
    "content-id": f"{_MIME_IS_BUILT}; give inline attachments a 'content_id'",
    "dkim-signature": "the service signs with the sending domain's DKIM key",
    "return-path": "the service sets the bounce address of the sending domain",
    "received": "mail servers add it in transit",
}

RESERVED_HEADERS: frozenset[str] = frozenset(_RESERVED_GUIDANCE)
"""Lowercased header names a caller may not set through ``headers``."""

RESERVED_HEADER_PREFIX = "x-posthaste-"

_TAG_NAME = re.compile(r"[A-Za-z0-9_-]{1,256}")


def validate_custom_headers(headers: object, field: str = "headers") -> dict[str, str]:
    """Check the custom ``headers`` object and return a copy with the names' case kept."""
    if headers is None:
        return {}
    if not isinstance(headers, dict):
        raise ValidationError(
            f"{field!r} must be an object of header names to string values, "
            f"got {json_type(headers)}."
        )
    if len(headers) > MAX_CUSTOM_HEADERS:
        raise ValidationError(
            f"{field!r} has {len(headers)} headers; at most {MAX_CUSTOM_HEADERS} are allowed."
        )
    checked: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in headers.items():
        _check_header(name, value, field)
        if name.lower() in seen:
            raise ValidationError(
                f"{field!r} sets {name!r} twice; header names are case-insensitive."
            )
        seen.add(name.lower())
        checked[name] = value
    return checked


def _check_header(name: object, value: object, field: str) -> None:
    checked_name = _check_header_name(name, field)
    _check_not_reserved(checked_name, field)
    where = f"{field}.{checked_name}"
    if not isinstance(value, str):
        raise ValidationError(f"{where!r} must be a string, got {json_type(value)}.")
    _check_text(value, where, "header values")
    if len(checked_name) + 2 + len(value) > MAX_HEADER_LINE_LENGTH:
        raise ValidationError(
            f"{where!r} is too long: 'Name: value' must fit in {MAX_HEADER_LINE_LENGTH} characters."
        )


def _check_header_name(name: object, field: str) -> str:
    """RFC 5322 field names: one or more printable ASCII characters (33-126) except ':'."""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"{field!r} has an empty header name.")
    if not all(33 <= ord(char) <= 126 and char != ":" for char in name):
        raise ValidationError(
            f"{field!r} has an invalid header name {_shown(name)}: use printable ASCII "
            "without spaces or ':'."
        )
    return name


def _check_not_reserved(name: str, field: str) -> None:
    lowered = name.lower()
    if lowered in _RESERVED_GUIDANCE:
        raise ValidationError(f"{field!r} cannot set {name!r}: {_RESERVED_GUIDANCE[lowered]}.")
    if lowered.startswith(RESERVED_HEADER_PREFIX):
        raise ValidationError(
            f"{field!r} cannot set {name!r}: the X-Posthaste- prefix is reserved for the "
            "service; use the 'tags' and 'stream_id' fields."
        )


def validate_subject(value: object) -> str:
    """Check a subject (given or rendered): a one-line string of at most 2,000 characters."""
    if not isinstance(value, str):
        raise ValidationError(f"'subject' must be a string, got {json_type(value)}.")
    if len(value) > MAX_SUBJECT_LENGTH:
        raise ValidationError(
            f"'subject' is {len(value)} characters long; at most {MAX_SUBJECT_LENGTH} are allowed."
        )
    _check_text(value, "subject", "a subject")
    return value


def validate_tags(value: object) -> dict[str, str]:
    """Check ``tags`` in either accepted form and return them as a flat name → value dict."""
    if value is None:
        return {}
    if isinstance(value, dict):
        entries = [_TagEntry(name, item, "tags", f"tags.{name}") for name, item in value.items()]
    elif isinstance(value, list):
        entries = [_tag_list_entry(item, f"tags[{index}]") for index, item in enumerate(value)]
    else:
        raise ValidationError(
            "'tags' must be an object of names to string values or an array of "
            f'{{"name", "value"}} objects, got {json_type(value)}.'
        )
    if len(entries) > MAX_TAGS:
        raise ValidationError(f"'tags' has {len(entries)} tags; at most {MAX_TAGS} are allowed.")
    return _collect_tags(entries)


class _TagEntry(NamedTuple):
    """One tag before checking, with the request paths its errors should name."""

    name: object
    value: object
    name_where: str
    value_where: str


def _tag_list_entry(item: object, where: str) -> _TagEntry:
    """One ``{"name": ..., "value": ...}`` entry of Resend's list form."""
    if not isinstance(item, dict):
        raise ValidationError(
            f'{where!r} must be an object with "name" and "value", got {json_type(item)}.'
        )
    for key in ("name", "value"):
        if key not in item:
            raise ValidationError(f"{where!r} is missing {key!r}.")
    return _TagEntry(item["name"], item["value"], f"{where}.name", f"{where}.value")


def _collect_tags(entries: list[_TagEntry]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for entry in entries:
        name = _check_tag_name(entry.name, entry.name_where)
        if name in tags:
            raise ValidationError(f"'tags' names {name!r} more than once.")
        tags[name] = _check_tag_value(entry.value, entry.value_where)
    return tags


def _check_tag_name(name: object, where: str) -> str:
    if not isinstance(name, str):
        raise ValidationError(f"{where!r} must be a string, got {json_type(name)}.")
    if not _TAG_NAME.fullmatch(name):
        raise ValidationError(
            f"Invalid tag name {_shown(name)} in {where!r}: use 1 to 256 ASCII letters, "
            "digits, '_' or '-'."
        )
    return name


def _check_tag_value(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{where!r} must be a string, got {json_type(value)}.")
    if len(value) > MAX_TAG_VALUE_LENGTH:
        raise ValidationError(
            f"{where!r} is {len(value)} characters long; "
            f"at most {MAX_TAG_VALUE_LENGTH} are allowed."
        )
    _check_text(value, where, "tag values")
    return value


def _check_text(value: str, where: str, what: str) -> None:
    """Refuse CR, LF, NUL and other control characters: they would inject or break headers."""
    if _FORBIDDEN.search(value) is None:  # the usual case, without a call per character
        return
    for char in value:
        if _is_forbidden_character(char):
            raise ValidationError(
                f"{where!r} contains {describe_character(char)}; "
                f"{what} must be a single line of text."
            )


def _is_forbidden_character(char: str) -> bool:
    # TAB is whitespace in a header; Zl/Zp count as line breaks to Python's email package.
    return char != "\t" and unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp")


# Every character ``_is_forbidden_character`` refuses: Cc (C0 but TAB, DEL, C1), Cs (the
# surrogates), Zl (U+2028) and Zp (U+2029), which Unicode keeps fixed.
_FORBIDDEN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _shown(text: str) -> str:
    """A name for an error message: at most 80 characters, non-printables escaped."""
    escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in shorten(text))
    return f'"{escaped}"'
