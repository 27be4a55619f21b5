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
- A message whose addresses have a non-ASCII addr-spec is generated with the stdlib's SMTPUTF8
  policy (RFC 6532: those headers carry raw UTF-8); the transport must then offer SMTPUTF8.

Where the stdlib misbehaves, and what this module does instead:

- Its quoted-printable encoder takes ``policy.max_line_length`` as its line length, and the SMTP
  policy's 78 breaks RFC 2045's 76: the policies here use 76.
- Its folder RFC 2047-encodes any header word too long for a line (a long ``List-Unsubscribe``
  URL or ``Content-ID`` becomes unusable), drops whitespace next to encoded words, takes
  encoded-word lookalikes in the input for encoded words and refuses U+2028 as a line break.
  So ``Subject``, custom headers and the msg-id headers are written here with ``set_raw`` (the
  policies' ``refold_source="none"`` keeps the generator from refolding them): plain ASCII
  verbatim, folded at spaces; anything else as a run of base64 encoded words, which decodes
  exactly. Address headers stay with the stdlib, whose encoding of them is correct.
"""

from __future__ import annotations

import base64
import email.policy
import hashlib
import html as html_entities
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.headerregistry import Address
from email.message import EmailMessage, MIMEPart
from email.policy import EmailPolicy

import html2text

_LINE_LENGTH = 76
_MAX_LINE_OCTETS = 998
_SMTP = email.policy.SMTP.clone(max_line_length=_LINE_LENGTH, refold_source="none")
_SMTPUTF8 = email.policy.SMTPUTF8.clone(max_line_length=_LINE_LENGTH, refold_source="none")
_BOUNDARY_MARK = "=_"
_ENCODED_WORD_OCTETS = 39  # 52 base64 characters: "Subject: =?utf-8?b?...?=" stays within 76
_OWNED_HEADERS = frozenset(
    {"from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id", "mime-version"}
)

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_SEVEN_BIT_TEXT = re.compile(r"[\t\r\n\x20-\x7e]*")
_PLAIN_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e]+(?: +[\x21-\x7e]+)*)?")
_HEADER_WORD = re.compile(r" *[^ ]+")
_MSG_ID_TEXT = re.compile(r"[\x21-\x3b\x3d\x3f-\x7e]{1,900}")  # printable ASCII without < >
_MEDIA_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
_SCRIPT_OR_STYLE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class MimeAttachment:
    """One attachment; a ``content_id`` makes it inline, referenced from html as ``cid:<id>``."""

    filename: str
    content_type: str
    content: bytes
    content_id: str | None = None


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
    attachments: Sequence[MimeAttachment]
    message_id: str
    date: datetime


def build_message(msg: OutgoingMessage) -> bytes:
    """The message as CRLF-terminated bytes, ready to DKIM-sign and hand to a transport."""
    mailboxes = _parse_mailboxes(msg)
    policy = _SMTPUTF8 if _has_utf8_address(mailboxes) else _SMTP
    root = MIMEPart(policy=policy)  # not EmailMessage: it stamps MIME-Version on every subpart
    _write_headers(root, msg, mailboxes)
    _write_body(root, msg, policy)
    _set_boundaries(root, _msg_id(msg.message_id, "Message-ID"))
    return root.as_bytes()


def requires_smtputf8(msg: OutgoingMessage) -> bool:
    """Whether the built message carries a non-ASCII address, so needs the SMTPUTF8 extension."""
    return _has_utf8_address(_parse_mailboxes(msg))


def make_message_id(domain: str, unique: str) -> str:
    """The ``<unique@domain>`` Message-ID of an email; ``domain`` is the sender's A-label."""
    return _msg_id(f"{unique}@{domain}", "Message-ID")


def html_to_text(html: str) -> str:
    """Readable plain text for the text/plain alternative of an html-only email; never raises."""
    try:
        markdown: str = _html_converter().handle(html)
    except Exception:  # html2text parses untrusted input; a delivery must not fail on its bugs
        markdown = _strip_tags(html)
    lines = (line.rstrip() for line in markdown.splitlines())
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip("\n")


def _html_converter() -> html2text.HTML2Text:
    converter = html2text.HTML2Text()
    converter.body_width = 0  # the transfer encoding keeps lines short; wrapping would break URLs
    converter.ignore_images = True
    converter.ignore_emphasis = True  # plain text reads better without ** and _ markers
    converter.unicode_snob = True  # keep "é" and curly quotes rather than ASCII lookalikes
    return converter


def _strip_tags(html: str) -> str:
    text = html_entities.unescape(_TAG.sub(" ", _SCRIPT_OR_STYLE.sub(" ", html)))
    return " ".join(text.split())


# Headers


def _parse_mailboxes(msg: OutgoingMessage) -> dict[str, tuple[Address, ...]]:
    """Each address header's mailboxes, in header order, leaving out empty ones."""
    fields = {"From": [msg.from_], "To": msg.to, "Cc": msg.cc, "Reply-To": msg.reply_to}
    parsed = {
        name: tuple(_parse_mailbox(name, text) for text in texts) for name, texts in fields.items()
    }
    return {name: boxes for name, boxes in parsed.items() if boxes}


def _has_utf8_address(mailboxes: Mapping[str, tuple[Address, ...]]) -> bool:
    return any(not box.addr_spec.isascii() for boxes in mailboxes.values() for box in boxes)


def _parse_mailbox(header: str, text: str) -> Address:
    _reject_line_breaks(header, text)
    found: tuple[Address, ...] = _SMTP.header_factory(header, text).addresses
    if len(found) != 1:
        raise ValueError(f"{header} entry {text!r} is not exactly one mailbox")
    return found[0]


def _write_headers(
    root: MIMEPart, msg: OutgoingMessage, mailboxes: Mapping[str, tuple[Address, ...]]
) -> None:
    root["Date"] = _aware(msg.date)
    root.set_raw("Message-ID", _msg_id(msg.message_id, "Message-ID"))
    for name, boxes in mailboxes.items():
        root[name] = boxes
    _set_text_header(root, "Subject", msg.subject)
    for name, value in msg.headers.items():
        if name.lower() in _OWNED_HEADERS or name.lower().startswith("content-"):
            raise ValueError(f"custom header {name!r} is reserved to the MIME builder")
        _set_text_header(root, name, value)
    root["MIME-Version"] = "1.0"


def _aware(date: datetime) -> datetime:
    if date.utcoffset() is None:
        raise ValueError("the Date must be a timezone-aware datetime")
    return date


def _msg_id(value: str, header: str) -> str:
    """``<id>`` from an id given with or without its angle brackets."""
    core = value.strip().removeprefix("<").removesuffix(">")
    if not _MSG_ID_TEXT.fullmatch(core):
        raise ValueError(f"{header} {value!r} is not printable ASCII without spaces or <>")
    return f"<{core}>"


def _set_text_header(part: MIMEPart, name: str, value: str) -> None:
    _reject_line_breaks(name, value)
    part.set_raw(name, "\r\n".join(_fold_text(name, value)))


def _reject_line_breaks(name: str, value: str) -> None:
    if "\r" in value or "\n" in value:
        raise ValueError(f"the {name} header value contains a line break")


def _fold_text(name: str, value: str) -> list[str]:
    """The value's lines: plain ASCII as given, folded at spaces; anything else encoded."""
    if _PLAIN_HEADER_VALUE.fullmatch(value) and "=?" not in value:
        lines = _fold_at_spaces(len(name) + 2, value)
        if len(name) + 2 + max(len(line) for line in lines) <= _MAX_LINE_OCTETS:
            return lines
    return [f"{' ' if index else ''}{word}" for index, word in enumerate(_encoded_words(value))]


def _fold_at_spaces(indent: int, value: str) -> list[str]:
    """Greedy folding before a space (RFC 5322 §2.2.3), so unfolding restores ``value``."""
    lines: list[str] = []
    line, room = "", _LINE_LENGTH - indent
    for word in _HEADER_WORD.findall(value):
        if line and len(line) + len(word) > room:
            lines.append(line)
            line, room = "", _LINE_LENGTH
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


# Body


def _write_body(root: MIMEPart, msg: OutgoingMessage, policy: EmailPolicy[EmailMessage]) -> None:
    inline = [a for a in msg.attachments if _is_inline(a, msg)]
    regular = [a for a in msg.attachments if not _is_inline(a, msg)]
    text = _plain_text(msg)
    root.set_content(text, subtype="plain", cte=_text_transfer_encoding(text))
    if msg.html is not None:
        root.make_alternative()
        root.attach(_html_part(msg.html, inline, policy))
    if regular:
        root.make_mixed()
        for attachment in regular:
            root.attach(_attachment_part(attachment, "attachment", policy))


def _is_inline(attachment: MimeAttachment, msg: OutgoingMessage) -> bool:
    return attachment.content_id is not None and msg.html is not None


def _plain_text(msg: OutgoingMessage) -> str:
    if msg.text is not None:
        return msg.text
    return html_to_text(msg.html) if msg.html is not None else ""


def _html_part(
    html: str, inline: Sequence[MimeAttachment], policy: EmailPolicy[EmailMessage]
) -> MIMEPart:
    part = MIMEPart(policy=policy)
    part.set_content(html, subtype="html", cte=_text_transfer_encoding(html))
    if inline:
        part.make_related()
        for attachment in inline:
            part.attach(_attachment_part(attachment, "inline", policy))
    return part


def _attachment_part(
    attachment: MimeAttachment, disposition: str, policy: EmailPolicy[EmailMessage]
) -> MIMEPart:
    part = MIMEPart(policy=policy)
    maintype, subtype = _leaf_media_type(attachment.content_type)
    part.set_content(
        attachment.content,
        maintype,
        subtype,
        cte="base64",
        disposition=disposition,
        filename=attachment.filename,
        params={"name": attachment.filename},  # older clients read the name from Content-Type
    )
    if attachment.content_id is not None:
        part.set_raw("Content-ID", _msg_id(attachment.content_id, "Content-ID"))
    return part


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


def _text_transfer_encoding(text: str) -> str:
    short_lines = all(len(line) <= _LINE_LENGTH for line in _LINE_BREAK.split(text))
    if short_lines and _SEVEN_BIT_TEXT.fullmatch(text) and _BOUNDARY_MARK not in text:
        return "7bit"
    return "quoted-printable"


def _set_boundaries(root: MIMEPart, message_id: str) -> None:
    token = hashlib.sha256(message_id.encode("utf-8")).hexdigest()[:32]
    for part in root.walk():
        if part.is_multipart():
            part.set_boundary(f"{_BOUNDARY_MARK}{part.get_content_subtype()}_{token}")
