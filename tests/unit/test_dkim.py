"""DKIM signing, verified by dkimpy against the published key."""

from __future__ import annotations

import dkim
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posthaste.core.dkim import DkimError, DkimKey, relaxed_body, sign_message
from tests.dkim_keys import dns_record, make_key, record_name

KEY = make_key()


def dnsfunc(name: bytes, timeout: int = 5) -> bytes:
    assert name.decode().rstrip(".") == record_name(KEY)
    return dns_record(KEY).encode()


def verifies(signed: bytes) -> bool:
    return bool(dkim.verify(signed, dnsfunc=dnsfunc))


def message(headers: str, body: bytes) -> bytes:
    return headers.replace("\n", "\r\n").encode("utf-8") + b"\r\n" + body


BASIC = (
    "From: Acme <hello@acme.test>\n"
    "To: someone@example.com\n"
    "Subject: Hello\n"
    "Date: Mon, 23 Nov 2026 12:00:00 +0000\n"
    "Message-ID: <1@acme.test>\n"
    "MIME-Version: 1.0\n"
    "Content-Type: text/plain; charset=utf-8\n"
)


def test_a_plain_message_verifies_with_the_headers_that_matter() -> None:
    signed = sign_message(message(BASIC, b"Hi there\r\n"), KEY, 1_700_000_000)
    assert verifies(signed)
    field = signed.split(b"\r\n\r\n", 1)[0].decode()
    assert "a=rsa-sha256" in field and "c=relaxed/relaxed" in field and "d=acme.test" in field
    tags = dkim.util.parse_tag_value(signed.split(b"DKIM-Signature:", 1)[1].split(b"\r\nFrom")[0])
    assert tags[b"h"].split(b":") == [
        b"from",
        b"from",
        b"to",
        b"subject",
        b"date",
        b"message-id",
        b"mime-version",
        b"content-type",
    ]


def test_folded_non_ascii_and_list_headers_verify() -> None:
    headers = (
        BASIC + "Subject: =?utf-8?q?Caf=C3=A9?= and a\n   long\t folded   subject\n"
        "List-Unsubscribe: <https://acme.test/u/1>,\n <mailto:u@acme.test>\n"
        "List-Unsubscribe-Post: List-Unsubscribe=One-Click\n"
        "X-Raw-Utf8: Zoë\n"
    )
    signed = sign_message(message(headers, "Grüße\r\n".encode()), KEY, 1)
    assert verifies(signed)
    assert b"list-unsubscribe:list-unsubscribe-post" in signed.replace(b"\r\n\t", b"")


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\r\n\r\n\r\n",
        b"line one  \r\n\tindented\t \r\n\r\n\r\n",
        b"no final newline   ",
        b"x" * 70 + b"\r\n" + (b"a long body line of text\r\n" * 20_000),
    ],
)
def test_bodies_verify(body: bytes) -> None:
    assert verifies(sign_message(message(BASIC, body), KEY, 1))


def test_bare_line_feeds_become_crlf_before_signing() -> None:
    raw = BASIC.encode() + b"\nbody\nmore\n"
    signed = sign_message(raw, KEY, 1)
    assert b"\r\nbody\r\nmore\r\n" in signed and b"more\n" not in signed.replace(b"\r\n", b"")
    assert verifies(signed)


def test_changing_a_signed_header_or_adding_a_from_breaks_the_signature() -> None:
    signed = sign_message(message(BASIC, b"Hi\r\n"), KEY, 1)
    assert not verifies(signed.replace(b"Subject: Hello", b"Subject: Hellp"))
    assert not verifies(b"From: evil@example.net\r\n" + signed)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([b"a", b" ", b"\t", b"\r\n", b"z z"]), max_size=40))
def test_relaxed_body_matches_dkimpy(parts: list[bytes]) -> None:
    body = b"".join(parts)
    expected = dkim.canonicalization.Relaxed.canonicalize_body(body)
    assert relaxed_body(body) == expected
    assert verifies(sign_message(message(BASIC, body), KEY, 1))


def test_a_key_that_is_not_a_private_key_is_refused() -> None:
    with pytest.raises(DkimError):
        sign_message(message(BASIC, b"x"), DkimKey("acme.test", "s", b"not a pem"), 1)
