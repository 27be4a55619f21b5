"""Secrets at rest and signed tokens, both keyed by ``POSTHASTE_SECRET_KEY``.

- ``SecretBox`` encrypts what must be readable again (DKIM private keys, webhook signing secrets)
  with AES-256-GCM. Each purpose derives its own key from the secret key (HKDF-SHA256), so a
  ciphertext of one purpose never decrypts as another, and the stored text carries a version
  prefix so the scheme can change later.
- ``TokenSigner`` makes short URL-safe tokens (VERP addresses, tracking and unsubscribe links)
  that carry a payload and a truncated HMAC-SHA256; ``verify`` compares in constant time.

Both take the secret key, or a key ring: the current key first, then the previous ones while a
rotation's grace period lasts (``POSTHASTE_SECRET_KEY_PREVIOUS``). They seal and sign with the
current key only, and open and verify with any key of the ring.
"""

from __future__ import annotations

import base64
import hmac
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_BOX_VERSION = "v1"
# What each SecretBox seals (its key is derived from the secret key and this name).
DKIM_KEY_PURPOSE = "dkim-key"
WEBHOOK_SECRET_PURPOSE = "webhook-secret"
_NONCE_BYTES = 12


Keys = str | Sequence[str]  # one secret key, or a ring: the current key, then previous ones


def key_ring(keys: Keys) -> tuple[str, ...]:
    ring = (keys,) if isinstance(keys, str) else tuple(keys)
    if not ring:
        raise ValueError("a key ring needs at least the current key")
    return ring


class DecryptionError(Exception):
    """A stored secret could not be decrypted: another secret key, another purpose, or damage."""


def derive_key(secret_key: str, purpose: str, length: int = 32) -> bytes:
    """A key for one purpose, derived from the service's secret key."""
    kdf = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=purpose.encode())
    return kdf.derive(secret_key.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SecretBox:
    """Authenticated encryption of small secrets for one purpose (e.g. ``"dkim-key"``)."""

    def __init__(self, secret_key: Keys, purpose: str) -> None:
        self._aeads = [
            AESGCM(derive_key(key, f"posthaste/box/{purpose}")) for key in key_ring(secret_key)
        ]
        self._purpose = purpose.encode()

    def encrypt(self, plaintext: bytes) -> str:
        """``v1.<base64url(nonce + ciphertext)>``: text, safe to store in any column."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aeads[0].encrypt(nonce, plaintext, self._purpose)
        return f"{_BOX_VERSION}.{_b64(nonce + sealed)}"

    def decrypt(self, stored: str) -> bytes:
        return self._open(stored)[0]

    def reseal(self, stored: str) -> str | None:
        """``stored`` encrypted again with the current key, or None when it already is (a
        rotation re-encrypts what only a previous key opens)."""
        plaintext, index = self._open(stored)
        return None if index == 0 else self.encrypt(plaintext)

    def _open(self, stored: str) -> tuple[bytes, int]:
        version, _, body = stored.partition(".")
        if version != _BOX_VERSION or not body:
            raise DecryptionError("unknown secret format")
        try:
            raw = _unb64(body)
        except ValueError as exc:
            raise DecryptionError("the secret is damaged") from exc
        for index, aead in enumerate(self._aeads):
            try:
                return aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], self._purpose), index
            except (InvalidTag, ValueError):
                continue
        raise DecryptionError("the secret does not decrypt with this secret key")


class TokenSigner:
    """Signed tokens ``<payload>.<mac>`` for one purpose; the payload is not secret."""

    def __init__(self, secret_key: Keys, purpose: str, *, mac_bytes: int = 12) -> None:
        self._keys = [derive_key(key, f"posthaste/token/{purpose}") for key in key_ring(secret_key)]
        self._mac_bytes = mac_bytes

    def digest(self, payload: bytes) -> bytes:
        """The truncated MAC of ``payload`` with the current key, raw: for tokens in another
        alphabet (VERP)."""
        return self._digest(self._keys[0], payload)

    def matches(self, payload: bytes, mac: bytes) -> bool:
        """``mac`` is ``payload``'s MAC under a key of the ring (constant time per key)."""
        found = False
        for key in self._keys:
            found |= hmac.compare_digest(self._digest(key, payload), mac)
        return found

    def _digest(self, key: bytes, payload: bytes) -> bytes:
        # ``hmac.digest``: OpenSSL's one-shot HMAC, a third of ``hmac.new(...).digest()``'s cost.
        return hmac.digest(key, payload, "sha256")[: self._mac_bytes]

    def sign(self, payload: bytes) -> str:
        return f"{_b64(payload)}.{_b64(self.digest(payload))}"

    def verify(self, token: str) -> bytes | None:
        """The payload of a genuine token, else None (never raises on junk)."""
        body, dot, mac = token.partition(".")
        if not dot or not mac or not token.isascii():
            return None
        try:
            payload, raw_mac = _unb64(body), _unb64(mac)
        except ValueError:
            return None
        return payload if self.matches(payload, raw_mac) else None
