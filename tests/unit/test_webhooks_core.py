"""Pure webhook logic: secrets, Standard Webhooks signatures (checked by the reference library),
retry delays, and the address policy behind SSRF protection."""

from __future__ import annotations

import base64
import random
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook as StandardWebhook
from standardwebhooks.webhooks import WebhookVerificationError

from posthaste.core.netpolicy import (
    endpoint_refusal,
    parse_endpoint,
    refusal_reason,
    resolved_refusal,
)
from posthaste.core.webhooks import (
    envelope_bytes,
    new_secret,
    request_headers,
    retry_delay,
    sign,
    signing_key,
)


def test_secrets_are_whsec_and_48_hex_and_a_36_byte_key() -> None:
    secret = new_secret()
    assert re.fullmatch(r"whsec_[0-9a-f]{48}", secret)
    assert len(signing_key(secret)) == 36
    assert signing_key(secret) == base64.b64decode(secret[len("whsec_") :])
    assert new_secret() != secret


def _signed(secrets: list[str], body: bytes, timestamp: int) -> dict[str, str]:
    keys = [signing_key(s) for s in secrets]
    return request_headers("evt-1", timestamp, sign("evt-1", timestamp, body, keys))


def test_signatures_verify_with_the_standardwebhooks_library() -> None:
    secret, other = new_secret(), new_secret()
    body = envelope_bytes("email.sent", 1_700_000_000_000, {"email_id": "e1"})
    headers = _signed([secret], body, int(time.time()))
    assert StandardWebhook(secret).verify(body, headers)["data"] == {"email_id": "e1"}
    with pytest.raises(WebhookVerificationError):
        StandardWebhook(other).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        StandardWebhook(secret).verify(body + b" ", headers)


def test_during_rotation_either_secret_verifies() -> None:
    new, old = new_secret(), new_secret()
    body = b'{"type":"email.sent"}'
    headers = _signed([new, old], body, int(time.time()))
    assert headers["webhook-signature"].count("v1,") == 2
    for secret in (new, old):
        StandardWebhook(secret).verify(body, headers)


def test_the_envelope_has_type_created_at_and_data() -> None:
    assert envelope_bytes("email.sent", 0, {"a": 1}) == (
        b'{"type":"email.sent","created_at":"1970-01-01T00:00:00.000Z","data":{"a":1}}'
    )


def test_retries_follow_the_schedule_then_give_up() -> None:
    schedule = (60.0, 300.0, 1800.0)
    assert [retry_delay(n, schedule, 0.0) for n in (1, 2, 3, 4)] == [60.0, 300.0, 1800.0, None]
    assert retry_delay(0, schedule, 0.0) is None


@given(
    attempt=st.integers(1, 10),
    jitter=st.floats(0, 0.5),
    seed=st.integers(0, 2**32),
)
def test_jitter_stays_within_its_fraction(attempt: int, jitter: float, seed: int) -> None:
    schedule = tuple(float(60 * n) for n in range(1, 11))
    delay = retry_delay(attempt, schedule, jitter, random.Random(seed))
    base = schedule[attempt - 1]
    assert delay is not None
    assert base * (1 - jitter) - 1e-9 <= delay <= base * (1 + jitter) + 1e-9


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.0.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("::ffff:127.0.0.1", "loopback"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("100.64.0.1", "non-public"),
        ("224.0.0.1", "non-public"),
        ("0.0.0.0", "private"),
    ],
)
def test_non_public_addresses_are_refused(address: str, reason: str) -> None:
    found = refusal_reason(address)
    assert found is not None and reason in found


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal_reason(address) is None


def test_endpoints_are_absolute_http_urls() -> None:
    assert parse_endpoint("https://Hooks.Example.com:8443/x?y=1").host == "hooks.example.com"
    assert str(parse_endpoint("http://[fd00:ec2::254]/").address) == "fd00:ec2::254"
    assert parse_endpoint("http://bücher.example/").host == "xn--bcher-kva.example"
    assert str(parse_endpoint("http://1572395042/").address) == "93.184.216.34"
    assert str(parse_endpoint("http://0x5d.0270.55330/").address) == "93.184.216.34"
    assert parse_endpoint("http://256.1.1.1/").address is None
    for bad in ("ftp://a.example/", "https:///x", "a.example/x", "http://a.example:0/", 3, ""):
        with pytest.raises(ValueError, match="endpoint"):
            parse_endpoint(bad)


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("http://localhost:9/hook", "localhost is a loopback name"),
        ("http://LOCALHOST./hook", "localhost is a loopback name"),
        ("https://a.b.localhost/", "a.b.localhost is a loopback name"),
        ("http://[::1]:9/hook", "::1 is a loopback address"),
        ("http://10.1.2.3/", "10.1.2.3 is a private address"),
        ("https://localhost.example.com/", None),  # an ordinary name: its addresses decide
        ("https://notlocalhost/", None),
        ("https://93.184.216.34/", None),
        # A host written as numbers is an address to every client (WHATWG URL, inet_aton).
        ("http://0/", "0 is a private address"),
        ("http://127.1/", "127.1 is a loopback address"),
        ("http://0x7f.0.0.1/", "0x7f.0.0.1 is a loopback address"),
        ("http://2130706433/", "2130706433 is a loopback address"),
        ("http://0251.0376.169.254/", "0251.0376.169.254 is a cloud metadata address"),
        ("http://1572395042/", None),  # 93.184.216.34
        ("http://1.2.3.4.5/", None),  # not an address: a name, decided by its addresses
        ("http://09.example/", None),
    ],
)
def test_what_is_refused_before_any_lookup(url: str, refusal: str | None) -> None:
    assert endpoint_refusal(parse_endpoint(url)) == refusal


def test_a_name_is_refused_by_its_first_non_public_address() -> None:
    assert resolved_refusal("a.example", ["93.184.216.34", "2606:4700::1"]) is None
    assert (
        resolved_refusal("a.example", ["93.184.216.34", "fe80::1", "10.0.0.1"])
        == "a.example resolves to fe80::1, a link-local address"
    )
