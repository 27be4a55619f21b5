"""``parse_message`` reads every message exactly as the stdlib's compat32 ``BytesParser`` does."""

from __future__ import annotations

import re
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.policy import SMTP, compat32
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posthaste.core.message_parser import parse_message

_STDLIB = BytesParser(policy=compat32)


def _shape(message: Message) -> Any:
    """Everything the parser decides: headers, structure, payloads, preamble, epilogue, defects."""
    payload = message.get_payload()
    body = [_shape(part) for part in payload] if isinstance(payload, list) else payload
    return (
        message.items(),
        message.preamble,
        message.epilogue,
        [type(defect).__name__ for defect in message.defects],
        body,
    )


def _same_as_stdlib(raw: bytes) -> None:
    assert _shape(parse_message(raw)) == _shape(_STDLIB.parsebytes(raw))


def _sample() -> bytes:
    message = EmailMessage()
    message["From"] = "Acme <hello@acme.test>"
    message["To"] = "Customer <customer@example.com>"
    message["Subject"] = "Your receipt"
    message.set_content("Thank you for your order.\n" * 12)
    message.add_alternative("<p>Thank you for your order.</p>\n" * 12, subtype="html")
    message.add_attachment(b"%PDF-1.4 receipt" * 50, maintype="application", subtype="pdf")
    return message.as_bytes(policy=SMTP)


def test_a_message_with_alternatives_and_an_attachment() -> None:
    raw = _sample()
    _same_as_stdlib(raw)
    assert [part.get_content_type() for part in parse_message(raw).walk()] == [
        "multipart/mixed",
        "multipart/alternative",
        "text/plain",
        "text/html",
        "application/pdf",
    ]


def test_no_regex_is_compiled_for_a_new_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the module: a fresh boundary costs no ``re.compile``."""
    raw = _sample()
    compiled: list[str] = []
    real = re.compile

    def recording(pattern: Any, flags: int = 0) -> Any:
        compiled.append(str(pattern))
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", recording)
    parse_message(raw)
    assert compiled == []
    _STDLIB.parsebytes(raw)  # the stdlib's own parser does compile one per multipart
    assert any("(?P<sep>" in pattern for pattern in compiled)


# Boundary characters: RFC 2046's, regex metacharacters and white space included.
_BOUNDARY = st.text(alphabet="abcXYZ019'()+_,-./:=? *[]{}|^$&~#\t", min_size=1, max_size=20).filter(
    lambda b: b.strip() == b
)
_EOL = st.sampled_from(["\r\n", "\n", "\r"])
_WORDS = st.text(alphabet="ab- .=\t", max_size=8)


@st.composite
def _body_line(draw: st.DrawFn, boundary: str) -> str:
    """Text, or something that starts like a boundary line and may or may not be one."""
    return draw(
        st.one_of(
            _WORDS,
            st.builds(
                lambda tail: f"--{boundary}{tail}",
                st.sampled_from(["", "--", " ", "\t", "-- \t", "x", "--x", " x", "-"]),
            ),
        )
    )


@st.composite
def _part(draw: st.DrawFn, depth: int = 0) -> list[str]:
    """Lines of one part (headers, blank line, body); multipart up to two levels deep."""
    if depth >= 2 or not draw(st.booleans()):
        text = draw(st.lists(_WORDS, max_size=4))
        return ["Content-Type: text/plain", "", *text]
    boundary = draw(_BOUNDARY)
    lines = [f'Content-Type: multipart/mixed; boundary="{boundary}"', ""]
    lines += draw(st.lists(_body_line(boundary), max_size=2))  # preamble
    for child in draw(st.lists(_part(depth + 1), min_size=0, max_size=3)):
        lines.append(f"--{boundary}")
        lines += child
        lines += draw(st.lists(_body_line(boundary), max_size=2))
    close = draw(st.sampled_from(["--", "-- ", "--\t ", None]))
    if close is not None:
        lines.append(f"--{boundary}{close}")
    lines += draw(st.lists(_WORDS, max_size=2))  # epilogue
    return lines


@given(lines=_part(), eol=_EOL, final_eol=st.booleans())
@settings(max_examples=300, deadline=None)
def test_any_multipart_reads_as_the_stdlib_reads_it(
    lines: list[str], eol: str, final_eol: bool
) -> None:
    text = "From: a@example.com" + eol + eol.join(lines) + (eol if final_eol else "")
    _same_as_stdlib(text.encode("ascii"))


@given(raw=st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_any_bytes_read_as_the_stdlib_reads_them(raw: bytes) -> None:
    _same_as_stdlib(b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n' + raw)


def test_a_message_longer_than_one_chunk() -> None:
    raw = _sample().replace(b"%PDF", b"%PDF" + b"x" * 20_000)
    _same_as_stdlib(raw)
