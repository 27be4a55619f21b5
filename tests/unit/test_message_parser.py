"""``parse_message`` reads every message exactly as the stdlib's compat32 ``BytesParser`` does."""

from __future__ import annotations

import re
from email.parser import BytesParser
from email.policy import compat32
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posthaste.core.message_parser import parse_message
from tests.unit.mime_samples import EOL, generated_message, part, sample, shape

_STDLIB = BytesParser(policy=compat32)


def _same_as_stdlib(raw: bytes) -> None:
    assert shape(parse_message(raw)) == shape(_STDLIB.parsebytes(raw))


def test_a_message_with_alternatives_and_an_attachment() -> None:
    raw = sample()
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
    raw = sample()
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


@given(lines=part(), eol=EOL, final_eol=st.booleans())
@settings(max_examples=300, deadline=None)
def test_any_multipart_reads_as_the_stdlib_reads_it(
    lines: list[str], eol: str, final_eol: bool
) -> None:
    _same_as_stdlib(generated_message(lines, eol, final_eol))


@given(raw=st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_any_bytes_read_as_the_stdlib_reads_them(raw: bytes) -> None:
    _same_as_stdlib(b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n' + raw)


def test_a_message_longer_than_one_chunk() -> None:
    raw = sample().replace(b"%PDF", b"%PDF" + b"x" * 20_000)
    _same_as_stdlib(raw)
