"""A large body is read as orjson reads it (the same values, an error wherever orjson raises
one), and an attachment's base64 decodes as ``base64.b64decode`` decodes it, on any input."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from posthaste.core import large_bodies
from posthaste.core.large_bodies import (
    NotJson,
    compact_length,
    decode_base64,
    large_body_text,
    parse_large_json,
)


def ours(document: bytes) -> tuple[str, Any]:
    try:
        return "ok", repr(parse_large_json(large_body_text(bytearray(document))))
    except NotJson:
        return "error", None


def orjsons(document: bytes) -> tuple[str, Any]:
    try:
        return "ok", repr(orjson.loads(document))
    except orjson.JSONDecodeError:
        return "error", None


EDGES = [
    b"NaN",
    b"[Infinity]",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"123456789012345678901234567890",
    b"[1234567890123456789, -12345678901234567890, 1e30]",
    b'["12345678901234567890123", 1]',
    b"1" + b"0" * 400,
    b'"\\\\ud800"',
    b'"\\ud800"',
    b'"\\udc00x"',
    b'"\\ud83d\\ude00"',
    b'{"\\ud800": 1}',
    b"\xef\xbb\xbf{}",
    b'{"a": 1, "a": 2, "b": 3}',
    b'"\x01"',
    b'"caf\xc3\xa9 \xf0\x9f\x98\x80"',
    b'{"\xf0\x9f\x98\x80": "\xe2\x82\xac"}',
    b'"\xff"',
    b'"\xc3"',
    b'"\xed\xa0\x80"',
    b"\xc3\xa9",
    b'"\\u0000"',
    b'"a\\/b\\n"',
    b"[1,]",
    b"01",
    b"-0",
    b"1.5E+2",
    b" [true ,false, null] ",
    b"[" * 500 + b"]" * 500,
]


@pytest.mark.parametrize("document", EDGES)
def test_edge_cases_read_as_orjson_reads_them(document: bytes) -> None:
    assert ours(document) == orjsons(document)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


@given(json_values, st.booleans())
def test_any_document_reads_as_orjson_reads_it(value: Any, ascii_only: bool) -> None:
    document = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert ours(document) == orjsons(document)


@given(
    st.binary(max_size=40)
    | st.text(alphabet='{}[]":,0123456789.eE+-\\utrfalsn \xe9', max_size=30).map(str.encode)
)
def test_any_bytes_read_or_fail_as_with_orjson(document: bytes) -> None:
    assert ours(document) == orjsons(document)


def test_the_text_is_ascii_and_the_buffer_is_emptied() -> None:
    body = bytearray('{"s": "café 😀"}'.encode())
    text = large_body_text(body)
    assert text.text.isascii() and body == bytearray()
    assert parse_large_json(text) == {"s": "café 😀"}


def stdlib(text: str) -> tuple[str, bytes | None]:
    try:
        return "ok", base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return "error", None


def decoded(text: str) -> tuple[str, bytes | None]:
    try:
        return "ok", decode_base64(text)
    except (binascii.Error, ValueError):
        return "error", None


base64_like = st.text(alphabet="QUJDRA+/=\n\r \t\x0bé*", max_size=60)
wrapped = st.binary(max_size=60).map(lambda b: base64.encodebytes(b).decode())


@given(base64_like | wrapped)
# Padding after a whole quartet, which a2b_base64 takes with it and refuses alone (found by
# this test): in the window, and in the next one.
@example("AAAA =")
@example("AAAA\n\n\n=")
def test_base64_decodes_as_the_standard_library_decodes_it(text: str) -> None:
    original = large_bodies.WINDOW
    large_bodies.WINDOW = 7  # many windows, each cut anywhere
    try:
        assert decoded(text) == stdlib(text)
        assert compact_length(text) == len("".join(text.split()))
    finally:
        large_bodies.WINDOW = original
