"""A message submitted over the SMTP relay, read into a ``SendRequest`` (pure: no I/O).

The relay keeps the submitted MIME rather than rebuilding it (PRODUCT §12), so two things come
out of one submission: the request the send path checks (addresses, subject, tags, stream, and
the html/text/attachments shown by ``GET /emails/{id}``), and the raw bytes that are stored and
later signed and delivered.

Decisions:

- ``from``, ``to``, ``cc``, ``reply_to`` and ``subject`` come from the headers. The envelope
  decides who receives the message: ``to``/``cc`` keep the header addresses that are envelope
  recipients, ``bcc`` is every other envelope recipient. When no ``To``/``Cc`` address is an
  envelope recipient (a list expanded by the client), the envelope recipients are the ``to``.
- ``X-Posthaste-Tags: k=v, k2=v2``, ``X-Posthaste-Stream: <id>`` and
  ``X-Posthaste-Idempotency-Key: <key>`` are read; every ``X-Posthaste-*`` field is removed from
  the stored message, and so is a ``Bcc`` field (as MTAs do on submission). The other header
  lines and the body are kept byte for byte; a missing ``Message-ID`` or ``Date`` is added at
  the top. Neither is joined to the message: the request carries the header lines apart
  (``raw_top``: the ``Date``, and the kept fields when some were removed, the body then taken
  from ``raw_from``), and the send path stores them and the submitted bytes as parts.
- A message without a ``Subject`` has the empty subject; one without a text or html body part
  is recorded with an empty ``text``.
"""

from __future__ import annotations

import email.policy
import functools
import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime
from email.message import Message
from email.utils import format_datetime, getaddresses
from typing import Any, NamedTuple

from posthaste.core import mime_params
from posthaste.core.addresses import Address, parse_address
from posthaste.core.message_parser import parse_message
from posthaste.core.mime_tree import decoded_payload, read_tree
from posthaste.core.models import Attachment, assembled
from posthaste.core.send_request import (
    CONTENT_ID,
    SendRequest,
    check_attachment_budget,
    parse_send_request,
)
from posthaste.errors import ValidationError

CONTROL_PREFIX = b"x-posthaste-"
_HEADER_NAME = re.compile(rb"^([\x21-\x39\x3b-\x7e]+)[ \t]*:")
# The structure is read with compat32 (``parse_message``), about 7x faster than the default
# policy, whose header registry is used only for the headers that need it (addresses, subject,
# encoded filenames).
_HEADERS = email.policy.default
_FOLD = re.compile(r"\r?\n(?=[ \t])")
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_ADDR_SPEC = rf"{_ATOM}(?:\.{_ATOM})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
_SIMPLE_MAILBOX = re.compile(
    rf'(?:({_ATOM}(?:[ \t]+{_ATOM})*)[ \t]*|"([^"\\\r\n]*)"[ \t]*)?<({_ADDR_SPEC})>|({_ADDR_SPEC})'
)

# The top-level header's values by lowercased name, in order.
_Values = dict[str, list[str]]
# On a leaf: its content type and whether it is inline (``_kind``).
_KIND = "_posthaste_kind"


@dataclass(frozen=True)
class Submission:
    """The checked request (carrying the raw message to keep) and the relay's control values."""

    request: SendRequest
    idempotency_key: str | None
    recipients: Sequence[str]

    @functools.cached_property
    def fingerprint(self) -> str:
        """What an idempotent retry must repeat: the same bytes to the same recipients (hashed
        only when asked: a message without an idempotency key never needs it)."""
        raw = self.request.raw
        assert raw is not None
        return _fingerprint(raw, self.recipients)


class _HeaderField(NamedTuple):
    """One field of the top header (a tuple: a message has a dozen, and a frozen dataclass's
    ``__init__`` cost more than reading them)."""

    name: bytes  # lowercased
    lines: bytes  # the field as submitted, folding and line ending included

    def value(self) -> str:
        unfolded = self.lines.split(b":", 1)[1].replace(b"\r\n", b"").replace(b"\n", b"")
        return unfolded.decode("utf-8", "replace").strip()


def parse_submission(raw: bytes, recipients: Sequence[str], now: datetime) -> Submission:
    """Read a submitted message and its envelope recipients; raises ``ValidationError``."""
    fields, body = _split_header(raw)
    control = {f.name: f.value() for f in fields if f.name.startswith(CONTROL_PREFIX)}
    read = _read_request(raw, recipients, control)  # the MIME tree is gone after it
    added = b"" if read.dated else _date_field(now.replace(microsecond=0))
    kept = [f.lines for f in fields if not _removed(f.name)]
    # The submitted bytes are kept as they are; the lines on top of them, or on top of the body
    # when fields were removed, beside them.
    unchanged = len(kept) == len(fields)
    # ``dataclasses.replace`` through the generated ``__init__`` was ~5 % of reading a message.
    values = {name: read.request.__dict__[name] for name in _REQUEST_FIELDS}
    values.update(
        attachments=read.attachments,
        raw=raw,
        raw_top=added if unchanged else added + b"".join(kept),
        raw_from=0 if unchanged else body,
        message_id=read.message_id,
    )
    request = assembled(SendRequest, values)
    key = control.get(CONTROL_PREFIX + b"idempotency-key")
    return Submission(request, key, tuple(recipients))


_REQUEST_FIELDS = tuple(f.name for f in dataclass_fields(SendRequest))


@dataclass(frozen=True)
class _Read:
    """What the MIME tree says: the request without its attachments, raw message and
    Message-ID, those two, and whether the message has a ``Date``."""

    request: SendRequest
    attachments: list[Attachment]
    message_id: str | None
    dated: bool


def _read_request(raw: bytes, recipients: Sequence[str], control: dict[bytes, str]) -> _Read:
    message = _tree(raw)
    values = _raw_values(message)
    sender = _single_from(values)
    bodies = _Bodies.of(message)
    request = parse_send_request(_request_body(values, sender, recipients, control, bodies), 0)
    check_attachment_budget(bodies.attachments)
    dated = "date" in values
    return _Read(request, bodies.attachments, _message_id(values), dated)


def _tree(raw: bytes) -> Message:
    """The MIME tree: built from the lines where the message is of the usual shapes (about a
    third of the stdlib parser's CPU), else by the stdlib's parser; the same tree either way.
    A leaf that cannot be a body whose base64 is well-formed is left unread: its bytes are
    decoded from the message's (``decoded_payload``), never held as base64 text."""
    tree = read_tree(raw, unread=_not_a_body)
    return parse_message(raw) if tree is None else tree


def _not_a_body(part: Message) -> bool:
    """A leaf ``_Bodies.of`` can only take for an attachment."""
    kind, inline = _kind(part)
    return not (inline and kind in ("text/plain", "text/html"))


def _kind(part: Message) -> tuple[str, bool]:
    """A leaf's content type and whether it is inline, read from its header once: the tree's
    reader asks (``_not_a_body``), then ``_Bodies.of``, each lookup a walk of the fields."""
    known: tuple[str, bool] | None = part.__dict__.get(_KIND)
    if known is None:
        known = (part.get_content_type(), part.get_content_disposition() != "attachment")
        part.__dict__[_KIND] = known
    return known


@functools.lru_cache(maxsize=2)
def _date_field(second: datetime) -> bytes:
    """The ``Date`` line to add; the same for every message of a second (and formatting it is
    costlier than reusing it)."""
    return f"Date: {format_datetime(second)}\r\n".encode("ascii")


def _removed(name: bytes) -> bool:
    """Our control headers, and ``Bcc`` (it would show every blind copy to every recipient)."""
    return name.startswith(CONTROL_PREFIX) or name == b"bcc"


def _split_header(raw: bytes) -> tuple[list[_HeaderField], int]:
    """The header fields as submitted, and where the rest (from the blank line on) starts."""
    fields: list[_HeaderField] = []
    position = 0
    while position < len(raw):
        end = raw.find(b"\n", position)
        end = len(raw) if end < 0 else end + 1
        line = raw[position:end]
        if line in (b"\r\n", b"\n"):
            break
        if line[:1] in (b" ", b"\t") and fields:
            last = fields[-1]
            fields[-1] = _HeaderField(last.name, last.lines + line)
        else:
            match = _HEADER_NAME.match(line)
            if match is None:
                raise ValidationError(
                    f"The message header has a malformed line: {line[:60]!r}; "
                    "end the header with an empty line before the body."
                )
            fields.append(_HeaderField(match.group(1).lower(), line))
        position = end
    if not fields:
        raise ValidationError("The message has no header fields.")
    return fields, position


def _single_from(values: _Values) -> Address:
    boxes = _mailboxes(values, "From")
    if len(boxes) != 1:
        raise ValidationError("The message must have a From header with exactly one address.")
    return boxes[0]


def _mailboxes(values: _Values, name: str) -> list[Address]:
    found: list[Address] = []
    for value in values.get(name.lower(), ()):
        if _is_plain(value):  # the common case, read without the (slow) header registry
            pairs = _mailbox_pairs(_unfold(value))
            found.extend(_mailbox(display, addr, name) for display, addr in pairs if addr)
            continue
        header = _HEADERS.header_factory(name, _header_text(value))
        for box in getattr(header, "addresses", ()):
            found.append(parse_address(str(box), name.lower()))
    return found


def _mailbox(display: str, addr: str, name: str) -> Address:
    parsed = parse_address(addr, name.lower())
    return Address(display.strip() or None, parsed.local, parsed.domain)


def _mailbox_pairs(text: str) -> list[tuple[str, str]]:
    """``getaddresses``' (display name, addr-spec) pairs; one ``Name <addr>``, ``"Name" <addr>``
    or ``addr`` (what nearly every message has) read by one regular expression, the same pair."""
    match = _SIMPLE_MAILBOX.fullmatch(text)
    if match is None:
        return getaddresses([text])
    words, quoted, bracketed, bare = match.groups()
    if bare is not None:
        return [("", bare)]
    return [(" ".join(words.split()) if words else quoted or "", bracketed)]


def _is_plain(value: str) -> bool:
    """ASCII without encoded words: no decoding needed."""
    return value.isascii() and "=?" not in value


def _unfold(value: str) -> str:
    return _FOLD.sub("", value).strip()


def _raw_values(message: Message) -> _Values:
    """The values as parsed, before compat32 wraps 8-bit ones in ``Header`` objects, by
    lowercased name (read once: six fields are looked up in them)."""
    values: _Values = {}
    for key, value in message.raw_items():
        values.setdefault(key.lower(), []).append(value)
    return values


def _header_text(value: str) -> str:
    """A header value as text: raw UTF-8 (RFC 6532) arrives as surrogate escapes."""
    if value.isascii():
        return value
    return value.encode("ascii", "surrogateescape").decode("utf-8", "replace")


def _subject(found: _Values) -> str:
    values = found.get("subject")
    if not values:
        return ""
    if _is_plain(values[0]):
        return _unfold(values[0])
    return str(_HEADERS.header_factory("Subject", _header_text(values[0])))


def _request_body(
    values: _Values,
    sender: Address,
    recipients: Sequence[str],
    control: dict[bytes, str],
    bodies: _Bodies,
) -> dict[str, Any]:
    envelope = [parse_address(r, "RCPT TO") for r in recipients]
    wanted = {a.lookup_key for a in envelope}
    to = [a for a in _mailboxes(values, "To") if a.lookup_key in wanted]
    cc = [a for a in _mailboxes(values, "Cc") if a.lookup_key in wanted]
    named = {a.lookup_key for a in to + cc}
    bcc = [a for a in envelope if a.lookup_key not in named]
    if not to and not cc:
        to, bcc = bcc, []
    return {
        "from": sender.formatted(),
        "to": [a.formatted() for a in to],
        "cc": [a.formatted() for a in cc],
        "bcc": [a.formatted() for a in bcc],
        "reply_to": [a.formatted() for a in _mailboxes(values, "Reply-To")],
        "subject": _subject(values),
        "html": bodies.html,
        "text": "" if bodies.html is None and bodies.text is None else bodies.text,
        "tags": _tags(control.get(CONTROL_PREFIX + b"tags")),
        "stream_id": control.get(CONTROL_PREFIX + b"stream"),
    }


def _tags(value: str | None) -> dict[str, str]:
    """``k=v, k2=v2`` into a tags object (validated with the API's rules afterwards)."""
    if not value:
        return {}
    tags: dict[str, str] = {}
    for item in value.split(","):
        name, sep, tag_value = item.strip().partition("=")
        if not sep:
            raise ValidationError(
                f"X-Posthaste-Tags: {item.strip()!r} is not name=value; "
                "write the header as 'X-Posthaste-Tags: k=v, k2=v2'."
            )
        tags[name.strip()] = tag_value.strip()
    return tags


@dataclass
class _Bodies:
    """The first inline text/plain and text/html leaves are the bodies; the rest attachments."""

    text: str | None
    html: str | None
    attachments: list[Attachment]

    @classmethod
    def of(cls, message: Message) -> _Bodies:
        bodies = cls(None, None, [])
        for index, part in enumerate(_leaves(message)):
            kind, inline = _kind(part)
            if inline and kind == "text/plain" and bodies.text is None:
                bodies.text = _decoded_text(part)
            elif inline and kind == "text/html" and bodies.html is None:
                bodies.html = _decoded_text(part)
            else:
                bodies.attachments.append(
                    Attachment(_filename(part, index), kind, _content(part), _content_id(part))
                )
        return bodies


def _decoded_text(part: Message) -> str:
    payload = part.get_payload(decode=True)
    octets = payload if isinstance(payload, bytes) else b""
    try:
        text = octets.decode(mime_params.charset(part, "us-ascii"), "replace")
    except LookupError:  # an unknown charset: keep what can be read
        text = octets.decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\x00", "")  # the record keeps LF


def _leaves(part: Message) -> Iterator[Message]:
    if part.is_multipart() and part.get_content_maintype() == "multipart":
        for child in part.get_payload():
            if isinstance(child, Message):
                yield from _leaves(child)
    else:
        yield part


def _content(part: Message) -> bytes:
    if part.get_content_maintype() == "message" and part.is_multipart():
        inner = part.get_payload(0)
        return inner.as_bytes() if isinstance(inner, Message) else b""
    return decoded_payload(part) or b""


def _filename(part: Message, index: int) -> str:
    name = part.get_filename()
    if name and "=?" in name:
        name = str(_HEADERS.header_factory("X-Filename", name))
    cleaned = "".join(ch for ch in (name or "") if ch not in "\r\n\x00").strip()
    return (cleaned or f"part-{index + 1}")[:255]


def _content_id(part: Message) -> str | None:
    value = part.get("Content-ID")
    if value is None:
        return None
    bare = str(value).strip().removeprefix("<").removesuffix(">")
    return bare if CONTENT_ID.fullmatch(bare) else None


def _message_id(found: _Values) -> str | None:
    """The message's own ``<id>``; None when it has none: the send path then gives it the
    email's, ``<email id@from domain>`` (``with_message_id``) as it does REST mail."""
    values = found.get("message-id")
    if values and values[0].strip():
        if not values[0].isascii():
            raise ValidationError("The Message-ID header must be ASCII.")
        return _bare_msg_id(values[0])
    return None


def with_message_id(raw: bytes, message_id: str) -> bytes:
    """A kept submission without a ``Message-ID``, with the one its email record got on top."""
    return f"Message-ID: {message_id}\r\n".encode("ascii") + raw


def _bare_msg_id(value: str) -> str:
    """``<id>`` as the record keeps it (``make_message_id``'s form), whatever the spacing."""
    return "<" + value.strip().removeprefix("<").removesuffix(">").strip() + ">"


def _fingerprint(raw: bytes, recipients: Sequence[str]) -> str:
    """What an idempotent retry must repeat: the same bytes to the same recipients."""
    digest = hashlib.sha256(raw)
    for recipient in sorted(r.lower() for r in recipients):
        digest.update(b"\0" + recipient.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()
