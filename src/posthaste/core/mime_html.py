"""The html parts of a finished message rewritten in place (pure: no I/O).

Tracking changes the html of a message after it exists as bytes: the one the MIME builder made
for REST, batch, broadcast and automation mail, or the one a client submitted over the SMTP
relay, kept as it came. ``rewrite_html_parts`` walks the MIME structure by its boundary lines,
finds each ``text/html`` part that is not an attachment (inside ``multipart/*`` at any depth;
never inside an attached ``message/rfc822``), decodes its transfer encoding, hands the text to
the caller and encodes what comes back the way the part was encoded. Every other byte of the
message (headers, other parts, preambles, boundaries, line ends) stays as it was.

Decisions:

- A UTF-8 (or US-ASCII) part that is valid UTF-8 is handed over as text, and written back as
  UTF-8: the same bytes. Any other part is handed over as a Latin-1 view of its bytes (one
  character a byte) with its charset beside it, so that a charset Python does not know, or
  bytes invalid in it, never alter the document; a charset that is not ASCII-compatible
  (UTF-16, UTF-32) leaves the part alone.
- A ``7bit``/``8bit``/``binary`` part whose rewritten lines would pass RFC 5322's 998 octets is
  re-encoded quoted-printable (its ``Content-Transfer-Encoding`` field replaced); base64 and
  quoted-printable parts stay in their encoding.
- A structure that cannot be followed (no blank line after a part's header, a multipart without
  its boundary or close delimiter, an unknown transfer encoding, undecodable base64) leaves that
  part or subtree untouched: the message still goes out, with less rewritten.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import compat32

__all__ = ["HtmlRewrite", "rewrite_html_parts"]

# (the part's text, and None when it is real text or the charset of which it is a Latin-1 view
# of the bytes) → the new text, or None to leave it
HtmlRewrite = Callable[[str, str | None], str | None]
MAX_LINE = 998  # RFC 5322 2.1.1, without the CRLF
_DEPTH = 20
_IDENTITY_CTES = ("7bit", "8bit", "binary")
_HEADERS = BytesHeaderParser(policy=compat32)


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    data: bytes


@dataclass(frozen=True)
class _Entity:
    start: int  # the header block's first byte
    head_end: int  # past the header block's last line end
    body: int  # the body's first byte (past the blank line)
    end: int
    fields: Message


def rewrite_html_parts(raw: bytes, rewrite: HtmlRewrite) -> bytes:
    """``raw`` with each html part's text replaced by ``rewrite``'s; the same object when
    nothing changed."""
    edits: list[_Edit] = []
    _walk(raw, 0, len(raw), 0, rewrite, edits)
    if not edits:
        return raw
    edits.sort(key=lambda edit: edit.start)
    pieces, position = [], 0
    for edit in edits:
        pieces += [raw[position : edit.start], edit.data]
        position = edit.end
    pieces.append(raw[position:])
    return b"".join(pieces)


def _walk(
    raw: bytes, start: int, end: int, depth: int, rewrite: HtmlRewrite, edits: list[_Edit]
) -> None:
    entity = _entity(raw, start, end)
    if entity is None:
        return
    fields = entity.fields
    if fields.get_content_maintype() == "multipart":
        boundary = fields.get_boundary()
        if boundary is None or depth >= _DEPTH or fields.get_content_subtype() == "digest":
            return
        parts = _parts(raw, entity.body, end, boundary.encode("ascii", "surrogateescape"))
        for part_start, part_end in parts or ():
            _walk(raw, part_start, part_end, depth + 1, rewrite, edits)
    elif fields.get_content_type() == "text/html" and _not_attached(fields):
        edits.extend(_rewrite_part(raw, entity, rewrite))


def _not_attached(fields: Message) -> bool:
    return fields.get_content_disposition() != "attachment"


def _entity(raw: bytes, start: int, end: int) -> _Entity | None:
    """The header block and body of the entity in ``raw[start:end]``."""
    if raw.startswith(b"\r\n", start):
        head_end, body = start, start + 2
    elif raw.startswith(b"\n", start):
        head_end, body = start, start + 1
    else:
        ends = (raw.find(b"\n\r\n", start, end), raw.find(b"\n\n", start, end))
        blank = [i for i in ends if i >= 0]
        if not blank:
            return None
        head_end = min(blank) + 1
        body = head_end + (2 if raw.startswith(b"\r\n", head_end) else 1)
    fields = _HEADERS.parsebytes(raw[start:head_end])
    return _Entity(start, head_end, body, end, fields)


def _parts(raw: bytes, start: int, end: int, boundary: bytes) -> list[tuple[int, int]] | None:
    """The spans of a multipart body's parts (each without the line end that belongs to the
    boundary line after it), or None unless boundary lines and a close delimiter are found."""
    separator = b"--" + boundary
    lines: list[tuple[int, int]] = []  # (line start, past its line end)
    position = start
    while True:
        found = raw.find(separator, position, end)
        if found < 0:
            return None  # no close delimiter
        line_end = raw.find(b"\n", found, end)
        line_end = end if line_end < 0 else line_end + 1
        at_line_start = found == start or raw[found - 1 : found] == b"\n"
        rest = raw[found + len(separator) : line_end]
        close = rest.startswith(b"--")
        if at_line_start and not rest[2 if close else 0 :].strip(b" \t\r\n"):
            lines.append((found, line_end))
            if close:
                break
        position = line_end
    spans = []
    for (_, part_start), (next_line, _) in itertools.pairwise(lines):
        part_end = next_line
        if raw[part_end - 2 : part_end] == b"\r\n":
            part_end -= 2
        elif raw[part_end - 1 : part_end] == b"\n":
            part_end -= 1
        spans.append((part_start, max(part_start, part_end)))
    return spans


def _rewrite_part(raw: bytes, entity: _Entity, rewrite: HtmlRewrite) -> list[_Edit]:
    fields = entity.fields
    cte = str(fields.get("content-transfer-encoding", "7bit")).strip().lower()
    charset = _charset(fields)
    body = raw[entity.body : entity.end]
    data = _decode(body, cte)
    if charset is None or data is None:
        return []
    text, view = _text(data, charset)
    new = rewrite(text, view)
    if new is None or new == text:
        return []
    eol = b"\r\n" if b"\r\n" in raw[entity.start : entity.body] or b"\r\n" in body else b"\n"
    new_data = new.encode("latin-1" if view else "utf-8")
    if cte in _IDENTITY_CTES and max(map(len, new_data.split(b"\n"))) > MAX_LINE:
        head = _with_transfer_encoding(raw[entity.start : entity.head_end], eol)
        return [
            _Edit(entity.start, entity.head_end, head),
            _Edit(entity.body, entity.end, binascii.b2a_qp(new_data, istext=True)),
        ]
    return [_Edit(entity.body, entity.end, _encode(new_data, cte, eol))]


def _text(data: bytes, charset: str) -> tuple[str, str | None]:
    """The part's text, and None when it is real text (UTF-8), else the charset of which it
    is a Latin-1 view."""
    if charset == "utf-8":
        try:
            return data.decode("utf-8"), None
        except UnicodeDecodeError:
            pass
    return data.decode("latin-1"), charset


def _charset(fields: Message) -> str | None:
    """The part's charset (default US-ASCII, read as UTF-8: a superset), None when its markup
    is not ASCII (UTF-16, UTF-32); one Python does not know is read as UTF-8."""
    name = str(fields.get_content_charset("utf-8"))
    try:
        codec = codecs.lookup(name)
    except LookupError:
        return "utf-8"
    if codec.name == "ascii":
        return "utf-8"
    try:
        ascii_compatible = "<a href=>".encode(codec.name) == b"<a href=>"
    except (UnicodeError, LookupError):
        return None
    return codec.name if ascii_compatible else None


def _decode(body: bytes, cte: str) -> bytes | None:
    if cte in _IDENTITY_CTES:
        return body
    if cte == "quoted-printable":
        return binascii.a2b_qp(body)
    if cte == "base64":
        try:
            return base64.b64decode(body)
        except (binascii.Error, ValueError):
            return None
    return None


def _encode(data: bytes, cte: str, eol: bytes) -> bytes:
    if cte == "quoted-printable":
        return binascii.b2a_qp(data, istext=True)
    if cte == "base64":
        return base64.encodebytes(data).replace(b"\n", eol)
    return data


def _with_transfer_encoding(head: bytes, eol: bytes) -> bytes:
    """A header block with its Content-Transfer-Encoding field (folded lines too) replaced."""
    kept: list[bytes] = []
    dropping = False
    for line in head.splitlines(keepends=True):
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                kept.append(line)
            continue
        dropping = line.split(b":", 1)[0].strip().lower() == b"content-transfer-encoding"
        if not dropping:
            kept.append(line)
    return b"".join(kept) + b"Content-Transfer-Encoding: quoted-printable" + eol
