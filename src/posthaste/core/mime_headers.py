"""Header fields for core/mime.py, written directly as text (pure: no I/O).

The stdlib's ``email`` header objects cost more than the rest of a build together, so the
fields are written here: plain values verbatim and folded at spaces within 76 characters
(RFC 5322 §2.2.3, so unfolding restores the value exactly), anything else as a run of base64
RFC 2047 encoded words, which decodes exactly. The stdlib stays where it is correct and rare:
parsing a mailbox that is not the usual ``addr`` or ``Name <addr>``, and the RFC 2231 form of
a filename that cannot travel as a quoted string.

Where the stdlib misbehaves, and what this module does instead: its folder RFC 2047-encodes any
header word too long for a line (a long ``List-Unsubscribe`` URL or ``Content-ID`` becomes
unusable), drops whitespace next to encoded words, takes encoded-word lookalikes in the input
for encoded words and refuses U+2028 as a line break.
"""

from __future__ import annotations

import base64
import email.policy
import re
from collections.abc import Iterator, Sequence
from email.headerregistry import Address
from email.message import MIMEPart
from typing import NamedTuple

LINE_LENGTH = 76
_MAX_LINE_OCTETS = 998
_ENCODED_WORD_OCTETS = 39  # 52 base64 characters: "Subject: =?utf-8?b?...?=" stays within 76
_SMTP = email.policy.SMTP.clone(max_line_length=LINE_LENGTH)

_PLAIN_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e]+(?: +[\x21-\x7e]+)*)?")
_HEADER_WORD = re.compile(r" *[^ ]+")
_MSG_ID_TEXT = re.compile(r"[\x21-\x3b\x3d\x3f-\x7e]{1,900}")  # printable ASCII without < >
# RFC 5322 atext, plus any non-ASCII character (RFC 6532); printability is checked apart.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-\x80-\U0010ffff]+"
_PHRASE = re.compile(rf"{_ATEXT}(?: {_ATEXT})*")
_DOT_ATOM = rf"{_ATEXT}(?:\.{_ATEXT})*"
_ADDR_SPEC = rf"{_DOT_ATOM}@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*"
_SIMPLE_MAILBOX = re.compile(
    rf"(?:(?P<name>{_ATEXT}(?: {_ATEXT})*) )?<(?P<angle>{_ADDR_SPEC})>|(?P<bare>{_ADDR_SPEC})"
)
_QUOTABLE = re.compile(r"[\x20-\x7e]*")
_SIMPLE_PARAMETER = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]*")  # printable ASCII, no " or \


class Mailbox(NamedTuple):
    """One mailbox of an address header: its display name (maybe empty) and addr-spec."""

    display_name: str
    addr_spec: str


# Unstructured fields: Subject and the caller's own headers


def text_field(name: str, value: str) -> str:
    """``Name: value`` and CRLF: plain ASCII as given, folded at spaces; anything else encoded."""
    reject_line_breaks(name, value)
    if _PLAIN_HEADER_VALUE.fullmatch(value) and "=?" not in value:
        lines = _fold_at_spaces(len(name) + 2, value)
        if _fits(name, lines):
            return _field(name, lines)
    return _field(
        name, [f"{' ' if i else ''}{word}" for i, word in enumerate(_encoded_words(value))]
    )


def msg_id(value: str, header: str) -> str:
    """``<id>`` from an id given with or without its angle brackets."""
    core = value.strip().removeprefix("<").removesuffix(">")
    if not _MSG_ID_TEXT.fullmatch(core):
        raise ValueError(f"{header} {value!r} is not printable ASCII without spaces or <>")
    return f"<{core}>"


def reject_line_breaks(name: str, value: str) -> None:
    """Refuse a value that would end its header early (and so inject others)."""
    if "\r" in value or "\n" in value:
        raise ValueError(f"the {name} header value contains a line break")


def _field(name: str, lines: Sequence[str]) -> str:
    return f"{name}: " + "\r\n".join(lines) + "\r\n"


def _fits(name: str, lines: Sequence[str]) -> bool:
    longest = max(len(line.encode("utf-8")) for line in lines)
    return len(name) + 2 + longest <= _MAX_LINE_OCTETS


def _fold_at_spaces(indent: int, value: str) -> list[str]:
    """Greedy folding before a space: each line after the first starts with its spaces."""
    lines: list[str] = []
    line, room = "", LINE_LENGTH - indent
    for word in _HEADER_WORD.findall(value):
        if line and len(line) + len(word) > room:
            lines.append(line)
            line, room = "", LINE_LENGTH
        line += word
    return [*lines, line]


def _encoded_words(value: str) -> Iterator[str]:
    """RFC 2047 base64 words of whole characters; readers ignore the folding between them."""
    chunk = b""
    for char in value:
        octets = char.encode("utf-8")
        if len(chunk) + len(octets) > _ENCODED_WORD_OCTETS:
            yield _encoded_word(chunk)
            chunk = b""
        chunk += octets
    if chunk:
        yield _encoded_word(chunk)


def _encoded_word(octets: bytes) -> str:
    return f"=?utf-8?b?{base64.b64encode(octets).decode('ascii')}?="


# Address fields


def parse_mailbox(header: str, text: str) -> Mailbox:
    """The one mailbox in ``text``: the usual forms by a pattern, the rest by the stdlib."""
    reject_line_breaks(header, text)
    simple = _SIMPLE_MAILBOX.fullmatch(text)
    if simple and "=?" not in text and text.isprintable():
        return Mailbox(simple["name"] or "", simple["angle"] or simple["bare"])
    found: tuple[Address, ...] = _SMTP.header_factory(header, text).addresses
    if len(found) != 1:
        raise ValueError(f"{header} entry {text!r} is not exactly one mailbox")
    return Mailbox(found[0].display_name, found[0].addr_spec)


def address_field(name: str, mailboxes: Sequence[Mailbox], utf8: bool) -> str:
    """``Name: a, B <b>`` folded at spaces; names RFC 2047-encoded unless ``utf8`` lets them be."""
    value = ", ".join(_mailbox_text(box, utf8, encode=False) for box in mailboxes)
    lines = _fold_at_spaces(len(name) + 2, value)
    if not _fits(name, lines):
        value = ", ".join(_mailbox_text(box, utf8, encode=True) for box in mailboxes)
        lines = _fold_at_spaces(len(name) + 2, value)
    return _field(name, lines)


def _mailbox_text(box: Mailbox, utf8: bool, encode: bool) -> str:
    if not box.display_name:
        return box.addr_spec
    return f"{_display_name(box.display_name, utf8, encode)} <{box.addr_spec}>"


def _display_name(name: str, utf8: bool, encode: bool) -> str:
    """The name as an atom phrase, else a quoted string, else encoded words."""
    raw_allowed = not encode and (utf8 or name.isascii()) and "=?" not in name
    if raw_allowed and name.isprintable():
        if _PHRASE.fullmatch(name):
            return name
        escaped = name.replace("\\", "\\\\").replace('"', '\\"')
        if utf8 or _QUOTABLE.fullmatch(name):
            return f'"{escaped}"'
    return " ".join(_encoded_words(name))


# Parameterized fields: Content-Type and Content-Disposition of attachments


def parameterized_field(name: str, value: str, parameter: str, argument: str) -> str:
    """``Name: value; parameter="argument"``, the argument quoted or in RFC 2231 form."""
    if _SIMPLE_PARAMETER.fullmatch(argument) and "=?" not in argument:
        first = f"{name}: {value};"
        rest = f'{parameter}="{argument}"'
        if len(first) + 1 + len(rest) <= LINE_LENGTH:
            return f"{first} {rest}\r\n"
        if 1 + len(rest) <= LINE_LENGTH:
            return f"{first}\r\n {rest}\r\n"
    return _stdlib_parameterized_field(name, value, parameter, argument)


def _stdlib_parameterized_field(name: str, value: str, parameter: str, argument: str) -> str:
    part = MIMEPart(policy=_SMTP)
    part[name] = value
    part.set_param(parameter, argument, header=name)
    return "".join(_SMTP.fold(field, header) for field, header in part.items())
