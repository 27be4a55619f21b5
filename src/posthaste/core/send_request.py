"""Parsing and validating one send request (REST body, batch item, or the relay's equivalent).

Pure: no I/O. Produces a ``SendRequest`` whose every field is already checked, or raises
``ValidationError`` naming the field. The checks that need the database (stream, template,
domain, suppression, quota) run later in ``services.sending``.
"""

from __future__ import annotations

import binascii
import mimetypes
import re
from dataclasses import dataclass, field
from typing import Any

from posthaste.core.addresses import Address, parse_address, parse_address_list
from posthaste.core.headers import validate_custom_headers, validate_subject, validate_tags
from posthaste.core.ids import parse_rfc3339
from posthaste.core.large_bodies import compact_length, decode_base64
from posthaste.core.models import Attachment, assembled
from posthaste.errors import ValidationError

MAX_RECIPIENTS = 50
MAX_ATTACHMENT_BYTES = 18 * 1024 * 1024
MAX_ATTACHMENTS = 100
MAX_SCHEDULE_AHEAD_MS = 30 * 24 * 3600 * 1000
# Whole-string patterns (``fullmatch``: a "$" would let a trailing newline through).
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
)
CONTENT_ID = re.compile(r"[\x21-\x3b\x3d\x3f-\x7e]{1,250}")  # printable ASCII without < >
# Python's built-in extension table only: a ``MimeTypes`` instance starts from the table compiled
# into the standard library and never reads the machine's mime.types files (the module-level
# ``guess_type`` does), so a filename gives the same type on every machine with this Python.
_MIME_TABLE = mimetypes.MimeTypes()
_COMPRESSED = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}


@dataclass(frozen=True)
class SendRequest:
    from_: Address
    to: list[Address]
    cc: list[Address]
    bcc: list[Address]
    reply_to: list[Address]
    subject: str | None
    html: str | None
    text: str | None
    headers: dict[str, str]
    tags: dict[str, str]
    data: dict[str, Any]
    scheduled_at: int | None
    template: str | None
    stream_id: str | None
    attachments: list[Attachment] = field(default_factory=list)
    raw: bytes | None = None  # a relay submission: the message to keep, not rebuild
    # Header lines kept on top of ``raw[raw_from:]``: the ``Date`` it lacked, and its own header
    # lines when fields were removed (``raw_from`` then where its body starts): a large message
    # is kept where it is, never copied to add or drop a line.
    raw_top: bytes = b""
    raw_from: int = 0
    # Its Message-ID, ``<id>``; None: the email's ``<email id@from domain>`` (added to ``raw``)
    message_id: str | None = None
    # A broadcast's recipient: its content is already rendered (from ``template_id``, if any)
    broadcast_id: str | None = None
    template_id: str | None = None

    def recipients(self) -> list[tuple[str, str]]:
        """Unique (lookup address, kind) pairs over to, cc and bcc, first occurrence wins
        (worked out once: the send path asks at every step)."""
        found: list[tuple[str, str]] | None = self.__dict__.get("_recipients")
        if found is None:
            seen: dict[str, str] = {}
            for kind, group in (("to", self.to), ("cc", self.cc), ("bcc", self.bcc)):
                for address in group:
                    seen.setdefault(address.lookup_key, kind)
            found = list(seen.items())
            object.__setattr__(self, "_recipients", found)
        return list(found)


def parse_send_request(body: object, now_ms: int) -> SendRequest:
    """Validate a send request body; raises ValidationError with the first problem found."""
    if not isinstance(body, dict):
        raise ValidationError("The request body must be a JSON object.")
    from_value = body.get("from")
    if from_value is None:
        raise ValidationError("The 'from' field is required.")
    if not isinstance(from_value, str):
        raise ValidationError("The 'from' field must be a string.")
    to = parse_address_list(body.get("to"), "to", required=True)
    cc = parse_address_list(body.get("cc"), "cc")
    bcc = parse_address_list(body.get("bcc"), "bcc")
    if len(to) + len(cc) + len(bcc) > MAX_RECIPIENTS:
        raise ValidationError(
            f"Too many recipients: at most {MAX_RECIPIENTS} across 'to', 'cc' and 'bcc'."
        )
    template = template_ref(body)
    # Assembled without the frozen dataclass's ``__init__`` (``models.assembled``), which cost
    # a few µs per batch item; every field is given, defaults included.
    request: SendRequest = assembled(
        SendRequest,
        {
            "from_": parse_address(from_value, "from"),
            "to": to,
            "cc": cc,
            "bcc": bcc,
            "reply_to": parse_address_list(body.get("reply_to"), "reply_to"),
            "subject": None if body.get("subject") is None else validate_subject(body["subject"]),
            "html": optional_text(body, "html"),
            "text": optional_text(body, "text"),
            "headers": validate_custom_headers(body.get("headers") or {}),
            "tags": validate_tags(body.get("tags") or {}),
            "data": template_data(body),
            "scheduled_at": scheduled_at_of(body.get("scheduled_at"), now_ms),
            "template": template,
            "stream_id": stream_id_of(body.get("stream_id")),
            "attachments": _attachments(body.get("attachments")),
            "raw": None,
            "raw_top": b"",
            "raw_from": 0,
            "message_id": None,
            "broadcast_id": None,
            "template_id": None,
        },
    )
    _require_content(request)
    return request


def optional_text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"The '{name}' field must be a string.")
    if "\x00" in value:
        raise ValidationError(f"The '{name}' field must not contain NUL characters.")
    return value


def _require_content(request: SendRequest) -> None:
    if request.template is not None:
        return
    if request.subject is None:
        raise ValidationError("The 'subject' field is required when no template is given.")
    if request.html is None and request.text is None:
        raise ValidationError("Give 'html' or 'text' (or a 'template') for the message body.")


def template_ref(body: dict[str, Any]) -> str | None:
    """``template`` (alias or id, or Resend's ``{id, variables}``) or ``template_id``."""
    template = body.get("template")
    template_id = body.get("template_id")
    if isinstance(template, dict):
        template = template.get("id")
    if template is not None and template_id is not None:
        raise ValidationError("Give either 'template' or 'template_id', not both.")
    ref = template if template is not None else template_id
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref.strip():
        raise ValidationError("The template reference must be a non-empty string.")
    return ref.strip()


def template_data(body: dict[str, Any]) -> dict[str, Any]:
    data = body.get("data")
    template = body.get("template")
    if data is None and isinstance(template, dict):
        data = template.get("variables")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError("The 'data' field must be an object of template variables.")
    return data


def scheduled_at_of(value: object, now_ms: int) -> int | None:
    """A future time within 30 days; a past time means now (None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError("'scheduled_at' must be an RFC 3339 timestamp string.")
    try:
        when = parse_rfc3339(value)
    except ValueError:
        raise ValidationError(
            f"'scheduled_at' must be an RFC 3339 timestamp with a time zone, got {value!r}."
        ) from None
    if when <= now_ms:
        return None
    if when - now_ms > MAX_SCHEDULE_AHEAD_MS:
        raise ValidationError("'scheduled_at' must be at most 30 days in the future.")
    return when


def stream_id_of(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError("'stream_id' must be a stream id string or null.")
    return value


def _attachments(value: object) -> list[Attachment]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError("'attachments' must be an array of attachment objects.")
    if len(value) > MAX_ATTACHMENTS:
        raise ValidationError(f"At most {MAX_ATTACHMENTS} attachments per email.")
    items = [_attachment(item, f"attachments[{i}]") for i, item in enumerate(value)]
    check_attachment_budget(items)
    return items


def check_attachment_budget(items: list[Attachment]) -> None:
    """At most 18 MiB of decoded attachments per email, however they were given."""
    total = sum(len(item.content) for item in items)
    if total > MAX_ATTACHMENT_BYTES:
        raise ValidationError(
            f"Attachments total {total} bytes; the limit is {MAX_ATTACHMENT_BYTES} bytes (18 MiB) "
            "decoded per email."
        )


def _attachment(item: object, where: str) -> Attachment:
    if not isinstance(item, dict):
        raise ValidationError(f"'{where}' must be an object.")
    filename = _attachment_string(item, "filename", where)
    if item.get("content_type") is None:
        content_type = guess_content_type(filename)
    else:
        content_type = _attachment_string(item, "content_type", where)
        if not _MEDIA_TYPE.fullmatch(content_type):
            raise ValidationError(f"'{where}.content_type' must be a media type like 'image/png'.")
    content_id = _content_id(item, where)
    if content_id is not None and (
        not isinstance(content_id, str) or not CONTENT_ID.fullmatch(content_id)
    ):
        raise ValidationError(
            f"'{where}.content_id' must be printable ASCII without spaces or angle brackets."
        )
    return Attachment(filename, content_type.lower(), _content(item, where), content_id)


def _content_id(item: dict[str, Any], where: str) -> object:
    """``content_id``, or Resend's other name for it, ``inline_content_id`` (not two values)."""
    given = item.get("content_id")
    other = item.get("inline_content_id")
    if given is not None and other is not None and given != other:
        raise ValidationError(
            f"'{where}.content_id' and '{where}.inline_content_id' name the same thing: "
            "give one, or the same value in both."
        )
    return given if given is not None else other


def guess_content_type(filename: str) -> str:
    """Resend's default: the type of the filename's extension, else application/octet-stream.

    Only the standard (strict) types of Python's own table count; a compressed suffix
    (``.gz``, ``.tgz``) names the compression format, which is what the bytes are.
    """
    # "./" keeps a "name:with.colon" from being read as a URL scheme.
    guessed, encoding = _MIME_TABLE.guess_type("./" + filename.replace("\\", "/"), strict=True)
    if encoding is not None:
        return _COMPRESSED.get(encoding, "application/octet-stream")
    return guessed or "application/octet-stream"


def _attachment_string(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"'{where}.{name}' is required and must be a non-empty string.")
    if any(ch in value for ch in "\r\n\x00") or len(value) > 255:
        raise ValidationError(
            f"'{where}.{name}' must be at most 255 characters without line breaks."
        )
    return value


def _content(item: dict[str, Any], where: str) -> bytes:
    """``content``: base64 text, or (as the Resend SDKs send it) an array of byte values."""
    content = item.get("content")
    if isinstance(content, list):
        return _byte_array(content, where)
    if not isinstance(content, str):
        if item.get("path") is not None:
            raise ValidationError(
                f"'{where}.path' is not supported: send the file as base64 in 'content'."
            )
        raise ValidationError(
            f"'{where}.content' is required: the file as a base64 string or an array of byte "
            "values (integers 0-255)."
        )
    most = (MAX_ATTACHMENT_BYTES * 4) // 3 + 4
    if len(content) > most and compact_length(content) > most:
        raise ValidationError(f"'{where}.content' is larger than the 18 MiB attachment budget.")
    try:
        return decode_base64(content)
    except (binascii.Error, ValueError):
        raise ValidationError(f"'{where}.content' is not valid base64.") from None


def _byte_array(content: list[Any], where: str) -> bytes:
    if len(content) > MAX_ATTACHMENT_BYTES:
        raise ValidationError(f"'{where}.content' is larger than the 18 MiB attachment budget.")
    for index, value in enumerate(content):
        # ``type() is int``: a JSON true/false is a bool, and bool is an int subclass.
        if type(value) is not int or not 0 <= value <= 255:
            raise ValidationError(
                f"'{where}.content[{index}]' must be an integer from 0 to 255 (a byte value)."
            )
    return bytes(content)
