"""Idempotency keys as entry points read them: the key and the fingerprint of what it guards.

``POST /emails`` takes the ``Idempotency-Key`` header and fingerprints the JSON body; the relay
takes ``X-Posthaste-Idempotency-Key`` and fingerprints the submitted message. The send path
(``services.sending``) reserves, replays and releases keys; it never looks at the edge's input.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
    """A stable hash of a JSON request body, insensitive to key order and whitespace."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
