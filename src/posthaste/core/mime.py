"""The RFC 5322 message a worker sends, built from an accepted email (pure: no I/O).

The MIME tree, PRODUCT §5; every level is left out when it would hold one part::

    multipart/mixed                          only with regular attachments
    ├── multipart/alternative                only with html
    │   ├── text/plain                       ``text``, or generated from ``html``
    │   └── multipart/related                only with inline parts (``content_id``)
    │       ├── text/html
    │       └── image/png                    Content-ID: <id>, Content-Disposition: inline
    └── application/pdf                      Content-Disposition: attachment

Decisions:

- Text parts are utf-8, ``7bit`` when printable ASCII with lines of at most 76 characters,
  else quoted-printable; attachments are base64. Line breaks become CRLF and a text body ends
  with one (the stdlib's normalisation; an empty text is one empty line).
- Boundaries are ``=_<subtype>_<hash of the Message-ID>``: the same input gives the same bytes.
  ``=_`` cannot occur in base64 or quoted-printable, and text containing it is never sent 7bit,
  so no body line can look like a boundary; the subtypes keep one boundary from prefixing another.
- Inline parts with no html to reference them travel as ordinary attachments.
- A message whose addresses have a non-ASCII addr-spec carries raw UTF-8 in its address
  headers (RFC 6532; display names too, unencoded); the transport must then offer SMTPUTF8.
  Every other message is 7-bit ASCII throughout.

The bytes are written here directly for these few shapes (the stdlib's ``email.message`` and
generator cost ~2 ms a message, twenty times the rest; bench/README.md); headers in
``core/mime_headers.py``, the text alternative of html in ``core/html_text.py``.
``tests/unit/test_mime.py`` parses every shape back with the stdlib's parser.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime

from posthaste.core.html_text import html_to_text
from posthaste.core.mime_headers import (
    LINE_LENGTH,
    Mailbox,
    address_field,
    msg_id,
    parameterized_field,
    parse_mailbox,
    text_field,
)
from posthaste.core.models import Attachment

_BOUNDARY_MARK = "=_"
_OWNED_HEADERS = frozenset(
    {"from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id", "mime-version"}
)

_SEVEN_BIT_TEXT = re.compile(r"[\t\r\n\x20-\x7e]*")
_MEDIA_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """What the worker sends, already validated at acceptance; Bcc is deliberately absent."""

    from_: str
    to: Sequence[str]
    cc: Sequence[str]
    reply_to: Sequence[str]
    subject: str
    html: str | None
    text: str | None
    headers: Mapping[str, str]
    attachments: Sequence[Attachment]
    message_id: str
    date: datetime


def build_message(msg: OutgoingMessage) -> bytes:
    """The message as CRLF-terminated bytes, ready to DKIM-sign and hand to a transport."""
    mailboxes = _parse_mailboxes(msg)
    utf8 = _has_utf8_address(mailboxes)
    token = hashlib.sha256(msg_id(msg.message_id, "Message-ID").encode("ascii")).hexdigest()[:32]
    content_headers, body = _body(msg, token)
    head = _message_headers(msg, mailboxes, utf8) + content_headers
    return head.encode("utf-8" if utf8 else "ascii") + b"\r\n" + body


def make_message_id(domain: str, unique: str) -> str:
    """The ``<unique@domain>`` Message-ID of an email; ``domain`` is the sender's A-label."""
    return msg_id(f"{unique}@{domain}", "Message-ID")


# Headers


def _parse_mailboxes(msg: OutgoingMessage) -> dict[str, tuple[Mailbox, ...]]:
    """Each address header's mailboxes, in header order, leaving out empty ones."""
    fields = {"From": [msg.from_], "To": msg.to, "Cc": msg.cc, "Reply-To": msg.reply_to}
    parsed = {
        name: tuple(parse_mailbox(name, text) for text in texts) for name, texts in fields.items()
    }
    return {name: boxes for name, boxes in parsed.items() if boxes}


def _has_utf8_address(mailboxes: Mapping[str, tuple[Mailbox, ...]]) -> bool:
    return any(not box.addr_spec.isascii() for boxes in mailboxes.values() for box in boxes)


def _message_headers(
    msg: OutgoingMessage, mailboxes: Mapping[str, tuple[Mailbox, ...]], utf8: bool
) -> str:
    fields = [
        f"Date: {format_datetime(_aware(msg.date))}\r\n",
        f"Message-ID: {msg_id(msg.message_id, 'Message-ID')}\r\n",
        *(address_field(name, boxes, utf8) for name, boxes in mailboxes.items()),
        text_field("Subject", msg.subject),
    ]
    for name, value in msg.headers.items():
        if name.lower() in _OWNED_HEADERS or name.lower().startswith("content-"):
            raise ValueError(f"custom header {name!r} is reserved to the MIME builder")
        fields.append(text_field(name, value))
    fields.append("MIME-Version: 1.0\r\n")
    return "".join(fields)


def _aware(date: datetime) -> datetime:
    if date.utcoffset() is None:
        raise ValueError("the Date must be a timezone-aware datetime")
    return date


# Body: each entity is its content headers (str) and its encoded body (bytes)

_Entity = tuple[str, bytes]


def _body(msg: OutgoingMessage, token: str) -> _Entity:
    inline = [a for a in msg.attachments if _is_inline(a, msg)]
    regular = [a for a in msg.attachments if not _is_inline(a, msg)]
    entity = _text_entity(_plain_text(msg), "plain")
    if msg.html is not None:
        html = _text_entity(msg.html, "html")
        if inline:
            parts = [_attachment_entity(a, "inline") for a in inline]
            html = _multipart("related", token, [html, *parts])
        entity = _multipart("alternative", token, [entity, html])
    if regular:
        parts = [_attachment_entity(a, "attachment") for a in regular]
        entity = _multipart("mixed", token, [entity, *parts])
    return entity


def _is_inline(attachment: Attachment, msg: OutgoingMessage) -> bool:
    return attachment.content_id is not None and msg.html is not None


def _plain_text(msg: OutgoingMessage) -> str:
    if msg.text is not None:
        return msg.text
    return html_to_text(msg.html) if msg.html is not None else ""


def _multipart(subtype: str, token: str, parts: Sequence[_Entity]) -> _Entity:
    """The parts between ``--boundary`` lines; each part's body ends with its own CRLF."""
    boundary = f"{_BOUNDARY_MARK}{subtype}_{token}"
    headers = f'Content-Type: multipart/{subtype};\r\n boundary="{boundary}"\r\n'
    delimiter = f"--{boundary}\r\n".encode("ascii")
    chunks = [delimiter]
    for index, (part_headers, part_body) in enumerate(parts):
        if index:
            chunks.append(b"\r\n" + delimiter)
        chunks += [part_headers.encode("ascii"), b"\r\n", part_body]
    chunks.append(f"\r\n--{boundary}--\r\n".encode("ascii"))
    return headers, b"".join(chunks)


def _text_entity(text: str, subtype: str) -> _Entity:
    """utf-8 text, CRLF line breaks and a final one: 7bit when it can be, else quoted-printable."""
    lines = text.encode("utf-8").splitlines()
    data = b"\r\n".join(lines) + b"\r\n"
    cte = _text_transfer_encoding(text, lines)
    if cte == "quoted-printable":
        data = binascii.b2a_qp(data, istext=True)
    headers = (
        f'Content-Type: text/{subtype}; charset="utf-8"\r\nContent-Transfer-Encoding: {cte}\r\n'
    )
    return headers, data


def _attachment_entity(attachment: Attachment, disposition: str) -> _Entity:
    maintype, subtype = _leaf_media_type(attachment.content_type)
    headers = [
        "Content-Transfer-Encoding: base64\r\n",
        parameterized_field("Content-Disposition", disposition, "filename", attachment.filename),
        parameterized_field("Content-Type", f"{maintype}/{subtype}", "name", attachment.filename),
    ]
    if attachment.content_id is not None:
        headers.append(f"Content-ID: {msg_id(attachment.content_id, 'Content-ID')}\r\n")
    body = base64.encodebytes(attachment.content).replace(b"\n", b"\r\n")
    return "".join(headers), body


def _leaf_media_type(content_type: str) -> tuple[str, str]:
    """``(maintype, subtype)``; composite or malformed types become application/octet-stream.

    multipart/* and message/* may not be base64-encoded (RFC 2046 §5), and these bytes are
    the caller's, never parsed here.
    """
    maintype, _, subtype = content_type.partition(";")[0].strip().lower().partition("/")
    well_formed = _MEDIA_TOKEN.fullmatch(maintype) and _MEDIA_TOKEN.fullmatch(subtype)
    if not well_formed or maintype in ("multipart", "message"):
        return "application", "octet-stream"
    return maintype, subtype


def _text_transfer_encoding(text: str, lines: Sequence[bytes]) -> str:
    short_lines = all(len(line) <= LINE_LENGTH for line in lines)
    if short_lines and _SEVEN_BIT_TEXT.fullmatch(text) and _BOUNDARY_MARK not in text:
        return "7bit"
    return "quoted-printable"
