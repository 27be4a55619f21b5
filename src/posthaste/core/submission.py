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
  the stored message. The other header lines and the body are kept byte for byte; a missing
  ``Message-ID`` or ``Date`` is added at the top.
- A message without a ``Subject`` has the empty subject; one without a text or html body part
  is recorded with an empty ``text``.
"""

from __future__ import annotations

import email.policy
import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from email.message import EmailMessage, MIMEPart
from email.parser import BytesParser
from email.utils import format_datetime
from typing import Any

from posthaste.core.addresses import Address, parse_address
from posthaste.core.ids import new_id
from posthaste.core.mime import make_message_id
from posthaste.core.send_request import (
    AttachmentInput,
    SendRequest,
    check_attachment_budget,
    parse_send_request,
)
from posthaste.errors import ValidationError

CONTROL_PREFIX = b"x-posthaste-"
_HEADER_NAME = re.compile(rb"^([\x21-\x39\x3b-\x7e]+)[ \t]*:")
_CONTENT_ID = re.compile(r"^[\x21-\x3b\x3d\x3f-\x7e]{1,250}$")
_PARSER = BytesParser(policy=email.policy.default)


@dataclass(frozen=True)
class Submission:
    """The checked request (carrying the raw message to keep) and the relay's control values."""

    request: SendRequest
    idempotency_key: str | None
    fingerprint: str


@dataclass(frozen=True)
class _HeaderField:
    name: bytes  # lowercased
    lines: bytes  # the field as submitted, folding and line ending included

    def value(self) -> str:
        unfolded = self.lines.split(b":", 1)[1].replace(b"\r\n", b"").replace(b"\n", b"")
        return unfolded.decode("utf-8", "replace").strip()


def parse_submission(raw: bytes, recipients: Sequence[str], now: datetime) -> Submission:
    """Read a submitted message and its envelope recipients; raises ``ValidationError``."""
    fields, body = _split_header(raw)
    control = {f.name: f.value() for f in fields if f.name.startswith(CONTROL_PREFIX)}
    message = _PARSER.parsebytes(raw)
    sender = _single_from(message)
    request = parse_send_request(_request_body(message, sender, recipients, control), 0)
    message_id = message.get("Message-ID")
    added: list[bytes] = []
    if message_id is None or not str(message_id).strip():
        message_id = make_message_id(sender.domain, new_id())
        added.append(f"Message-ID: {message_id}\r\n".encode("ascii"))
    if message.get("Date") is None:
        added.append(f"Date: {format_datetime(now)}\r\n".encode("ascii"))
    kept = b"".join(f.lines for f in fields if not f.name.startswith(CONTROL_PREFIX))
    attachments = list(_attachments(message))
    check_attachment_budget(attachments)
    request = replace(
        request,
        attachments=attachments,
        raw=b"".join(added) + kept + body,
        message_id=_bare_msg_id(str(message_id)),
    )
    key = control.get(CONTROL_PREFIX + b"idempotency-key")
    return Submission(request, key, _fingerprint(raw, recipients))


def _split_header(raw: bytes) -> tuple[list[_HeaderField], bytes]:
    """The header fields as submitted, and everything from the blank line on."""
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
    return fields, raw[position:]


def _single_from(message: EmailMessage) -> Address:
    boxes = _mailboxes(message, "From")
    if len(boxes) != 1:
        raise ValidationError("The message must have a From header with exactly one address.")
    return boxes[0]


def _mailboxes(message: EmailMessage, name: str) -> list[Address]:
    found: list[Address] = []
    for header in message.get_all(name) or []:
        for box in getattr(header, "addresses", ()):
            found.append(parse_address(str(box), name.lower()))
    return found


def _request_body(
    message: EmailMessage, sender: Address, recipients: Sequence[str], control: dict[bytes, str]
) -> dict[str, Any]:
    envelope = [parse_address(r, "RCPT TO") for r in recipients]
    wanted = {a.lookup_key for a in envelope}
    to = [a for a in _mailboxes(message, "To") if a.lookup_key in wanted]
    cc = [a for a in _mailboxes(message, "Cc") if a.lookup_key in wanted]
    named = {a.lookup_key for a in to + cc}
    bcc = [a for a in envelope if a.lookup_key not in named]
    if not to and not cc:
        to, bcc = bcc, []
    html, text = _body_text(message, "html"), _body_text(message, "plain")
    subject = message.get("Subject")
    return {
        "from": sender.formatted(),
        "to": [a.formatted() for a in to],
        "cc": [a.formatted() for a in cc],
        "bcc": [a.formatted() for a in bcc],
        "reply_to": [a.formatted() for a in _mailboxes(message, "Reply-To")],
        "subject": "" if subject is None else str(subject),
        "html": html,
        "text": "" if html is None and text is None else text,
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


def _body_text(message: EmailMessage, subtype: str) -> str | None:
    part = message.get_body(preferencelist=(subtype,))
    if part is None:
        return None
    return _decoded_text(part)


def _decoded_text(part: MIMEPart) -> str:
    try:
        content = part.get_content()
    except (LookupError, UnicodeError):  # an unknown or lying charset: keep what can be read
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    return str(content).replace("\r\n", "\n").replace("\x00", "")  # the record keeps LF


def _attachments(message: EmailMessage) -> Iterator[AttachmentInput]:
    """Every leaf part other than the message's text and html bodies, in order."""
    bodies = {id(message.get_body(preferencelist=(kind,))) for kind in ("html", "plain")}
    for index, part in enumerate(_leaves(message)):
        if id(part) in bodies:
            continue
        yield AttachmentInput(
            _filename(part, index),
            part.get_content_type(),
            _content(part),
            _content_id(part),
        )


def _leaves(part: EmailMessage) -> Iterator[EmailMessage]:
    if part.get_content_maintype() == "multipart" and part.is_multipart():
        for child in part.iter_parts():
            yield from _leaves(child)  # type: ignore[arg-type]
    else:
        yield part


def _content(part: EmailMessage) -> bytes:
    if part.get_content_maintype() == "message" and part.is_multipart():
        inner = part.get_payload(0)
        return bytes(inner.as_bytes()) if isinstance(inner, EmailMessage) else b""
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def _filename(part: EmailMessage, index: int) -> str:
    name = part.get_filename() or f"part-{index + 1}"
    cleaned = "".join(ch for ch in name if ch not in "\r\n\x00").strip()
    return (cleaned or f"part-{index + 1}")[:255]


def _content_id(part: EmailMessage) -> str | None:
    value = part.get("Content-ID")
    if value is None:
        return None
    bare = str(value).strip().removeprefix("<").removesuffix(">")
    return bare if _CONTENT_ID.match(bare) else None


def _bare_msg_id(value: str) -> str:
    """``<id>`` as the record keeps it (``make_message_id``'s form), whatever the spacing."""
    return "<" + value.strip().removeprefix("<").removesuffix(">").strip() + ">"


def _fingerprint(raw: bytes, recipients: Sequence[str]) -> str:
    """What an idempotent retry must repeat: the same bytes to the same recipients."""
    digest = hashlib.sha256(raw)
    for recipient in sorted(r.lower() for r in recipients):
        digest.update(b"\0" + recipient.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()
