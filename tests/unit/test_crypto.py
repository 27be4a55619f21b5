"""Secrets at rest and signed tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.crypto import DecryptionError, SecretBox, TokenSigner

KEY = "k" * 48


@given(st.binary(max_size=4096))
def test_a_secret_decrypts_to_itself(plaintext: bytes) -> None:
    box = SecretBox(KEY, "dkim-key")
    stored = box.encrypt(plaintext)
    assert stored.startswith("v1.")
    assert box.decrypt(stored) == plaintext


def test_ciphertexts_differ_and_hide_the_plaintext() -> None:
    box = SecretBox(KEY, "dkim-key")
    first, second = box.encrypt(b"private key"), box.encrypt(b"private key")
    assert first != second
    assert "private" not in first


@pytest.mark.parametrize(
    ("secret_key", "purpose"), [("other" * 10, "dkim-key"), (KEY, "webhook-secret")]
)
def test_another_key_or_purpose_cannot_decrypt(secret_key: str, purpose: str) -> None:
    stored = SecretBox(KEY, "dkim-key").encrypt(b"secret")
    with pytest.raises(DecryptionError):
        SecretBox(secret_key, purpose).decrypt(stored)


@pytest.mark.parametrize("stored", ["", "v1.", "v2.abcd", "v1.!!!!", "v1.AAAA"])
def test_damaged_secrets_raise_decryption_error(stored: str) -> None:
    with pytest.raises(DecryptionError):
        SecretBox(KEY, "dkim-key").decrypt(stored)


@given(st.binary(max_size=64))
def test_a_signed_token_verifies_to_its_payload(payload: bytes) -> None:
    signer = TokenSigner(KEY, "verp")
    assert signer.verify(signer.sign(payload)) == payload


def test_tampered_or_foreign_tokens_do_not_verify() -> None:
    token = TokenSigner(KEY, "verp").sign(b"email-id")
    body, mac = token.split(".")
    assert TokenSigner(KEY, "unsubscribe").verify(token) is None
    assert TokenSigner("x" * 48, "verp").verify(token) is None
    assert TokenSigner(KEY, "verp").verify(body + "." + mac[::-1]) is None
    assert TokenSigner(KEY, "verp").verify("b3RoZXI." + mac) is None  # another payload


@given(st.text(max_size=80))
def test_junk_never_raises(junk: str) -> None:
    assert TokenSigner(KEY, "verp").verify(junk) is None


OLD, NEW = "o" * 40, "n" * 40


def test_a_key_ring_seals_with_its_first_key_and_opens_with_any() -> None:
    sealed_before = SecretBox(OLD, "dkim-key").encrypt(b"pem")
    ring = SecretBox((NEW, OLD), "dkim-key")
    assert ring.decrypt(sealed_before) == b"pem"
    assert SecretBox(NEW, "dkim-key").decrypt(ring.encrypt(b"now")) == b"now"
    resealed = ring.reseal(sealed_before)
    assert resealed is not None and SecretBox(NEW, "dkim-key").decrypt(resealed) == b"pem"
    assert ring.reseal(resealed) is None  # already sealed with the current key
    with pytest.raises(DecryptionError):
        SecretBox(NEW, "dkim-key").decrypt(sealed_before)


def test_a_key_ring_signs_with_its_first_key_and_verifies_with_any() -> None:
    before = TokenSigner(OLD, "verp").sign(b"payload")
    ring = TokenSigner((NEW, OLD), "verp")
    assert ring.verify(before) == b"payload"
    assert TokenSigner(NEW, "verp").verify(before) is None  # the old key gone: no longer valid
    assert TokenSigner(NEW, "verp").verify(ring.sign(b"now")) == b"now"
    assert ring.matches(b"payload", TokenSigner(OLD, "verp").digest(b"payload"))
    assert not ring.matches(b"payload", TokenSigner("x" * 40, "verp").digest(b"payload"))
    with pytest.raises(ValueError):
        TokenSigner((), "verp")
