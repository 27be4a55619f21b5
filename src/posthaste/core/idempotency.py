"""Idempotency keys as entry points read them: the key and the fingerprint of what it guards.

``POST /emails`` takes the ``Idempotency-Key`` header and fingerprints the JSON body; the relay
takes ``X-Posthaste-Idempotency-Key`` and fingerprints the submitted message. The send path
(``services.sending``) reserves, replays and releases keys; it never looks at the edge's input.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from posthaste.errors import InvalidIdempotencyKey

MAX_KEY_LENGTH = 256


@dataclass(frozen=True)
class IdempotencyKey:
    """A checked key and the fingerprint of its request (same key, other fingerprint: 409)."""

    key: str
    fingerprint: str


def idempotency_key(value: str, fingerprint: str) -> IdempotencyKey:
    """The key a client gave, checked: 1 to 256 characters, no control characters."""
    if not value or len(value) > MAX_KEY_LENGTH or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidIdempotencyKey()
    return IdempotencyKey(value, fingerprint)


def body_fingerprint(body: object) -> str:
    """A stable hash of a JSON request body, insensitive to key order and whitespace: the
    SHA-256 of ``orjson.dumps(body, option=OPT_SORT_KEYS)``, fed to the hash piece by piece so
    that a large body is not written out whole (orjson reserves many times its size)."""
    digest = hashlib.sha256()
    _feed(digest, body, 0)
    return digest.hexdigest()


_WINDOW = 64 * 1024
_SHALLOW = 64  # deeper containers are written whole (orjson refuses past 255 levels)


def _feed(digest: Any, value: object, depth: int) -> None:
    if isinstance(value, dict) and depth < _SHALLOW:
        digest.update(b"{")
        for index, key in enumerate(sorted(value)):
            digest.update(b"," if index else b"")
            _feed(digest, key, depth + 1)
            digest.update(b":")
            _feed(digest, value[key], depth + 1)
        digest.update(b"}")
    elif isinstance(value, list) and depth < _SHALLOW:
        digest.update(b"[")
        for index, item in enumerate(value):
            digest.update(b"," if index else b"")
            _feed(digest, item, depth + 1)
        digest.update(b"]")
    elif isinstance(value, str) and len(value) > _WINDOW:
        digest.update(b'"')
        for start in range(0, len(value), _WINDOW):
            digest.update(orjson.dumps(value[start : start + _WINDOW])[1:-1])
        digest.update(b'"')
    else:
        digest.update(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
