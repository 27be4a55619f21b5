"""``multipart/form-data`` bodies (RFC 7578), as Resend's SDKs upload a contact import's CSV:
parts are found as offsets into the body, and the one kept is cut out of it in place, so the
upload is never held twice (pure, no I/O)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from posthaste.errors import ValidationError

_BOUNDARY = re.compile(r';\s*boundary=(?:"([^"]+)"|([^\s;]+))', re.I)
_NAME = re.compile(r'(?:^|;)\s*name="([^"]*)"', re.I)
_FILENAME = re.compile(r'(?:^|;)\s*filename="([^"]*)"', re.I)
_HEADERS_END = b"\r\n\r\n"


@dataclass(frozen=True)
class FormPart:
    """A part's content: bytes ``[start, end)`` of the body."""

    body: bytearray
    start: int
    end: int
    filename: str | None

    def text(self, name: str) -> str:
        """The part as UTF-8 text (a form field's value)."""
        try:
            return self.body[self.start : self.end].decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError(f"The form field {name!r} is not UTF-8 text.") from None

    def cut_out(self) -> bytearray:
        """The body, shortened in place to this part alone (other parts' offsets are gone)."""
        del self.body[self.end :]
        del self.body[: self.start]
        return self.body


def parse_form_data(body: bytearray, content_type: str) -> dict[str, FormPart]:
    """The parts of a form body by their field names (a repeated name: the last part)."""
    found = _BOUNDARY.search(content_type)
    if found is None:
        raise ValidationError("The multipart body's Content-Type names no boundary.")
    delimiter = b"--" + (found.group(1) or found.group(2)).encode("latin-1")
    parts: dict[str, FormPart] = {}
    position = body.find(delimiter)
    if position < 0:
        raise _malformed()
    position += len(delimiter)
    while body[position : position + 2] != b"--":
        if body[position : position + 2] != b"\r\n":
            raise _malformed()
        headers_end = body.find(_HEADERS_END, position)
        content_end = body.find(b"\r\n" + delimiter, headers_end + 4)
        if headers_end < 0 or content_end < 0:
            raise _malformed()
        name, filename = _disposition(bytes(body[position + 2 : headers_end]))
        parts[name] = FormPart(body, headers_end + 4, content_end, filename)
        position = content_end + 2 + len(delimiter)
    return parts


def _disposition(headers: bytes) -> tuple[str, str | None]:
    for header in headers.decode("utf-8", "replace").split("\r\n"):
        label, _, value = header.partition(":")
        if label.strip().lower() == "content-disposition":
            name = _NAME.search(value)
            if name is None:
                break
            filename = _FILENAME.search(value)
            return name.group(1), filename.group(1) if filename else None
    raise ValidationError("A part of the multipart body has no Content-Disposition name.")


def _malformed() -> ValidationError:
    return ValidationError("The multipart body is malformed: no part or an unclosed part.")
