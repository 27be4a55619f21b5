"""Received mail without I/O: a raw message read into the received-email record's fields.

The message is parsed once into the stdlib's ``email`` tree with ``policy.default`` (RFC 2047
words and RFC 2231 parameters decoded), read by ``core.mime_tree`` where it has the usual shape;
address fields of the usual shape are read by a pattern into the same ``Address`` objects
(``plain_addresses``), the rest by the stdlib's header parser.
The text and html bodies are the parts ``EmailMessage.get_body`` picks; every other leaf part
is an attachment, named by its MIME path (``"1.0"``: the first part of the second part), so
that its bytes are read back from the raw message on download (``attachment_content``) and
never stored a second time. A decoded download is byte-exact: base64 and quoted-printable are
undone, nothing else is touched.
"""

from __future__ import annotations

import functools
import mimetypes
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from email import policy
from email.headerregistry import Address, BaseHeader, HeaderRegistry
from email.message import EmailMessage, Message
from email.parser import BytesParser
from typing import Any

from posthaste.core.addresses import parse_address
from posthaste.core.mime_tree import decoded_payload, decoded_size, read_tree
from posthaste.errors import ValidationError

MAX_INBOUND_BYTES = 40 * 1024 * 1024  # advertised as SIZE, refused with 552 past it


class _MemoizedHeaders(HeaderRegistry):
    """policy.default's header registry, remembering what it parsed: the parser and the
    content manager read a part's Content-Type a dozen times, and policy.default parses the
    field afresh at every read (four fifths of the cost of reading a small message). Header
    objects are immutable ``str`` subclasses, so the same one may be handed out again."""

    @functools.lru_cache(maxsize=512)  # noqa: B019  (one registry, alive as long as the process)
    def __call__(self, name: str, value: str) -> BaseHeader:
        return super().__call__(name, value)


POLICY = policy.default.clone(header_factory=_MemoizedHeaders())
_PARSER = BytesParser(policy=POLICY)
_DEPTH = 50  # deeper than real mail nests: the rest of such a message stays in the raw


@dataclass(frozen=True)
class InboundAttachment:
    """An attachment of a received message: where it sits in the MIME tree, and what it is."""

    part: str
    filename: str | None
    content_type: str
    size: int
    content_id: str | None
    disposition: str  # "inline" or "attachment"


@dataclass(frozen=True)
class InboundMessage:
    """The fields of a received message, from its headers (the envelope fills the gaps)."""

    from_address: str
    from_lookup: str
    to: list[str]
    cc: list[str]
    reply_to: list[str]
    subject: str
    text: str | None
    html: str | None
    headers: dict[str, str]
    message_id: str
    attachments: list[InboundAttachment] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)  # lookup keys of To and Cc


def parse_message(raw: bytes, *, sizes_only: bool = False) -> EmailMessage:
    """The stdlib parser's tree of ``raw`` (``policy.default``); built from the offsets of its
    lines where the message is of the usual shapes (``core.mime_tree``), which copies each
    part once where the stdlib parser holds each one's lines and their join. With
    ``sizes_only``, a part that cannot be a body (``_body_candidate``) and is well-formed
    base64 is not decoded at all: its size is counted (``decoded_size``)."""
    unread = _not_a_body if sizes_only else None
    tree = read_tree(raw, POLICY, unread=unread)
    message = _PARSER.parsebytes(raw) if tree is None else tree
    assert isinstance(message, EmailMessage)  # policy.default makes EmailMessage objects
    return message


def read_inbound(raw: bytes, mail_from: str, on_top: bytes = b"") -> InboundMessage:
    """The record's fields of ``on_top + raw`` (``on_top``: header fields we add, read as the
    message's first ones), without joining them; ``mail_from`` (the envelope sender) stands in
    for a missing or unreadable From. Never raises on malformed mail: what cannot be read is
    empty."""
    message = parse_message(raw, sizes_only=True)  # attachments are read when downloaded
    from_list = _addresses(message, "from")
    sender = from_list[0] if from_list else None
    from_address = str(sender) if sender is not None else mail_from
    to, cc = _addresses(message, "to"), _addresses(message, "cc")
    leaves = [_Leaf.of(path, entity) for path, entity in _leaves(message, (), 0)]
    bodies = _bodies(leaves)
    return InboundMessage(
        from_address=from_address,
        from_lookup=lookup_key(sender.addr_spec if sender is not None else mail_from),
        to=[str(a) for a in to],
        cc=[str(a) for a in cc],
        reply_to=[str(a) for a in _addresses(message, "reply-to")],
        subject=_header_text(message, "subject"),
        text=_content(bodies.get("text/plain")),
        html=_content(bodies.get("text/html")),
        headers=_header_map_under(on_top, message),
        message_id=_header_text(message, "message-id"),
        attachments=[_attachment(leaf) for leaf in leaves if leaf not in bodies.values()],
        addresses=list(dict.fromkeys(lookup_key(a.addr_spec) for a in [*to, *cc] if a.addr_spec)),
    )


def lookup_key(address: str) -> str:
    """An address in its lookup form (A-label domain, lower case); raw text if it won't parse."""
    try:
        return parse_address(address, "address").lookup_key
    except ValidationError:
        return address.strip().lower()[:320]


def _header_map_under(on_top: bytes, message: Message) -> dict[str, str]:
    """``header_map`` of the message with the fields ``on_top`` first (theirs go)."""
    if not on_top:
        return header_map(message)
    ours = header_map(parse_message(on_top + b"\r\n"))
    taken = {name.lower() for name in ours}
    return ours | {name: v for name, v in header_map(message).items() if name.lower() not in taken}


def header_map(message: Message) -> dict[str, str]:
    """Each header field's first value (the topmost: for ``Received``, the newest), decoded."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    for name, raw in message.raw_items():
        if name.lower() not in seen:
            seen.add(name.lower())
            found[name] = _unfolded(_decoded_header(message, name) if "=?" in raw else raw)
    return found


def _decoded_header(message: Message, name: str) -> Any:
    """The field's first value with its RFC 2047 words decoded (parsing every field of every
    message, encoded or not, was most of the cost of reading one)."""
    try:
        return message.get(name)
    except (ValueError, IndexError, TypeError, AttributeError, LookupError):
        return message.get_all(name, [""])[0]  # a field the parser trips over: as written


def attachment_content(raw: bytes, part: str) -> bytes | None:
    """The decoded bytes of the part at MIME path ``part`` of ``raw``; None if there is none."""
    entity: Message = parse_message(raw)
    for index in (int(step) for step in part.split(".") if step):
        children = entity.get_payload()
        if not isinstance(children, list) or index >= len(children):
            return None
        child = children[index]
        if not isinstance(child, Message):
            return None
        entity = child
    return _decoded(entity)


def _addresses(message: EmailMessage, name: str) -> list[Address]:
    plain = plain_addresses(_raw_value(message, name))
    if plain is not None:
        return plain
    try:
        header: Any = message.get(name)
        if header is None:
            return []
        return [a for a in header.addresses if a.addr_spec and "@" in a.addr_spec]
    except (AttributeError, ValueError, IndexError, TypeError):
        return []


def _raw_value(message: Message, name: str) -> str | None:
    """The first ``name`` field as it was written (not parsed), or None."""
    for field_name, value in message.raw_items():
        if field_name.lower() == name:
            return value if isinstance(value, str) else None
    return None


# RFC 5322 atext, ASCII: the usual ``addr``, ``Name <addr>`` mailboxes of an address field.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_ADDR = rf"({_ATOM}(?:\.{_ATOM})*)@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)"
_PLAIN_MAILBOX = re.compile(
    rf"[ \t]*(?:(?:({_ATOM}(?:[ \t]+{_ATOM})*)[ \t]*)?<{_ADDR}>|{_ADDR})[ \t]*"
)


def plain_addresses(value: str | None) -> list[Address] | None:
    """The mailboxes of an address field (``To``, ``From``...) of the usual shape, as
    ``policy.default`` reads them, without its parser; None: not of that shape (no field, a
    group, a comment, a quoted or encoded name...), for the stdlib to read. The recipient
    changes with every message, so the header memo misses: the stdlib's parser was two fifths
    of reading a small message."""
    if value is None or "=?" in value:
        return None
    if "\r" in value or "\n" in value:  # folded: the stdlib unfolds by dropping line breaks
        value = value.replace("\r", "").replace("\n", "")
    found: list[Address] = []
    for item in value.split(","):
        match = _PLAIN_MAILBOX.fullmatch(item)
        if match is None:
            return None
        name, local, domain, bare_local, bare_domain = match.groups()
        if local is None:
            found.append(Address("", bare_local, bare_domain))
        else:
            found.append(Address(" ".join(name.split()) if name else "", local, domain))
    return found


def _header_text(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except (ValueError, IndexError, TypeError, AttributeError):
        return ""
    return "" if value is None else _unfolded(value)


def _unfolded(value: Any) -> str:
    return " ".join(str(value).split())


@dataclass(frozen=True, eq=False)
class _Leaf:
    """A leaf part with its headers read once (policy.default parses a field at every read)."""

    path: tuple[int, ...]
    entity: Message
    content_type: str
    disposition: str | None
    filename: str | None

    @classmethod
    def of(cls, path: tuple[int, ...], entity: Message) -> _Leaf:
        disposition = entity.get_content_disposition()
        return cls(path, entity, entity.get_content_type(), disposition, _filename(entity))


def _bodies(leaves: list[_Leaf]) -> dict[str, _Leaf]:
    """The first text/plain and the first text/html leaf that are not attachments."""
    found: dict[str, _Leaf] = {}
    for leaf in leaves:
        if _body_candidate(leaf.content_type, leaf.disposition, leaf.filename):
            found.setdefault(leaf.content_type, leaf)
    return found


def _body_candidate(content_type: str, disposition: str | None, filename: str | None) -> bool:
    return content_type in ("text/plain", "text/html") and (
        disposition != "attachment" and filename is None
    )


def _not_a_body(part: Message) -> bool:
    """A leaf ``_bodies`` can never pick: only its size is needed."""
    disposition = part.get_content_disposition()
    return not _body_candidate(part.get_content_type(), disposition, _filename(part))


def _content(leaf: _Leaf | None) -> str | None:
    if leaf is None:
        return None
    part = leaf.entity
    try:
        content = part.get_content() if isinstance(part, EmailMessage) else None
    except (LookupError, ValueError, TypeError, AssertionError):
        content = None
    if not isinstance(content, str):
        charset = part.get_content_charset() or "utf-8"
        data = _decoded(part) or b""
        try:
            content = data.decode(charset, "replace")
        except LookupError:
            content = data.decode("utf-8", "replace")
    return content.replace("\r\n", "\n")


def _attachment(leaf: _Leaf) -> InboundAttachment:
    entity = leaf.entity
    content_id = entity.get("content-id")
    inline = leaf.disposition == "inline" or leaf.disposition is None
    return InboundAttachment(
        part=".".join(str(step) for step in leaf.path),
        filename=leaf.filename,
        content_type=leaf.content_type,
        size=_decoded_size(entity),
        content_id=str(content_id).strip().strip("<>") if content_id else None,
        disposition="inline" if inline and content_id else "attachment",
    )


def _leaves(
    entity: Message, path: tuple[int, ...], depth: int
) -> Iterator[tuple[tuple[int, ...], Message]]:
    """Every part that is not a multipart container, with its path; an attached message
    (``message/rfc822``) is one leaf, itself an attachment."""
    if entity.get_content_maintype() == "multipart":
        children = entity.get_payload()
        if isinstance(children, list) and depth < _DEPTH:
            for index, child in enumerate(children):
                yield from _leaves(child, (*path, index), depth + 1)
        return
    yield path, entity


def _filename(entity: Message) -> str | None:
    if not _may_name_a_file(entity):
        return None
    try:
        name = entity.get_filename()
    except (ValueError, TypeError, LookupError):
        return None
    return " ".join(name.split()) if name else None


def _may_name_a_file(entity: Message) -> bool:
    """Whether a ``Content-Type`` or ``Content-Disposition`` field of the part could carry a
    ``filename`` or ``name`` parameter (``get_filename`` parses both fields to find out, a
    tenth of reading a small message): such a parameter has ``name`` in its field as written,
    unless it is inside an encoded word."""
    for field_name, value in entity.raw_items():
        if field_name.lower() in _NAMING_FIELDS:
            written = str(value).lower()
            if "name" in written or "=?" in written:
                return True
    return False


_NAMING_FIELDS = ("content-type", "content-disposition")


def _decoded_size(entity: Message) -> int:
    """How many bytes ``_decoded`` gives, without holding them where it can count them."""
    if entity.is_multipart():  # not get_payload(): it copies a text payload to check it
        return len(_decoded(entity) or b"")
    return decoded_size(entity)


def _decoded(entity: Message) -> bytes | None:
    """The part's bytes with its transfer encoding undone; an attached message as written."""
    payload = entity.get_payload()
    if isinstance(payload, list):  # message/rfc822 and the like: the enclosed message
        enclosed = payload[0] if payload else None
        return enclosed.as_bytes(policy=policy.SMTP) if isinstance(enclosed, Message) else None
    return decoded_payload(entity)


@dataclass(frozen=True)
class ReceivedAttachment:
    """A stored attachment of a received message (its bytes stay in the raw message)."""

    id: str
    email_id: str
    position: int
    part: str
    filename: str
    content_type: str
    size: int
    content_id: str | None
    disposition: str


@dataclass(frozen=True)
class ReceivedEmail:
    """A message the inbound server stored: ``kind`` ``received`` (what the API lists), or a
    report to a VERP address about the email ``email_id`` (kept for inspection)."""

    id: str
    team_id: str
    kind: str
    email_id: str | None
    mail_from: str
    from_address: str
    from_lookup: str
    to: list[str]
    cc: list[str]
    reply_to: list[str]
    received_for: list[str]
    subject: str
    html: str | None
    text: str | None
    headers: dict[str, str]
    message_id: str
    authentication: dict[str, str]
    raw_blob_id: str
    size: int
    created_at: int
    attachments: list[ReceivedAttachment] = field(default_factory=list)


def attachment_filename(item: InboundAttachment, position: int) -> str:
    """The part's own name, else ``attachment-<n>`` with the extension of its type."""
    if item.filename:
        return item.filename
    extension = mimetypes.guess_extension(item.content_type) or ".bin"
    return f"attachment-{position + 1}{extension}"


@dataclass(frozen=True)
class Mailbox:
    """An accepted RCPT: the team it is for and, for a VERP address, the email it names; for
    an unsubscribe address, its token."""

    team_id: str
    address: str  # lookup form
    email_id: str | None = None
    unsubscribe: str | None = None  # ``unsubscribe+<token>``: the local part, lower case


@dataclass(frozen=True)
class Arrival:
    """One message as the server received it."""

    mail_from: str
    mailboxes: Sequence[Mailbox]
    raw: bytes
    client_ip: str | None = None
    helo: str | None = None
