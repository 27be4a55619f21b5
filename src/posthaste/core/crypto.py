"""Secrets at rest and signed tokens, both keyed by ``POSTHASTE_SECRET_KEY``.

- ``SecretBox`` encrypts what must be readable again (DKIM private keys, webhook signing secrets)
  with AES-256-GCM. Each purpose derives its own key from the secret key (HKDF-SHA256), so a
  ciphertext of one purpose never decrypts as another, and the stored text carries a version
  prefix so the scheme can change later.
- ``TokenSigner`` makes short URL-safe tokens (VERP addresses, tracking and unsubscribe links)
  that carry a payload and a truncated HMAC-SHA256; ``verify`` compares in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_BOX_VERSION = "v1"
_NONCE_BYTES = 12


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

    def __init__(self, secret_key: str, purpose: str) -> None:
        self._aead = AESGCM(derive_key(secret_key, f"posthaste/box/{purpose}"))
        self._purpose = purpose.encode()

    def encrypt(self, plaintext: bytes) -> str:
        """``v1.<base64url(nonce + ciphertext)>``: text, safe to store in any column."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, self._purpose)
        return f"{_BOX_VERSION}.{_b64(nonce + sealed)}"

    def decrypt(self, stored: str) -> bytes:
        version, _, body = stored.partition(".")
        if version != _BOX_VERSION or not body:
            raise DecryptionError("unknown secret format")
        try:
            raw = _unb64(body)
            return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], self._purpose)
        except (InvalidTag, ValueError) as exc:
            raise DecryptionError("the secret does not decrypt with this secret key") from exc


class TokenSigner:
    """Signed tokens ``<payload>.<mac>`` for one purpose; the payload is not secret."""

    def __init__(self, secret_key: str, purpose: str, *, mac_bytes: int = 12) -> None:
        self._key = derive_key(secret_key, f"posthaste/token/{purpose}")
        self._mac_bytes = mac_bytes

    def digest(self, payload: bytes) -> bytes:
        """The truncated MAC of ``payload``, raw: for tokens in another alphabet (VERP)."""
        return hmac.new(self._key, payload, hashlib.sha256).digest()[: self._mac_bytes]

    def _mac(self, payload: bytes) -> str:
        return _b64(self.digest(payload))

    def sign(self, payload: bytes) -> str:
        return f"{_b64(payload)}.{self._mac(payload)}"

    def verify(self, token: str) -> bytes | None:
        """The payload of a genuine token, else None (never raises on junk)."""
        body, dot, mac = token.partition(".")
        if not dot or not mac or not token.isascii():
            return None
        try:
            payload = _unb64(body)
        except ValueError:
            return None
        return payload if hmac.compare_digest(self._mac(payload), mac) else None
