"""Idempotency keys for POST /emails and the relay's X-Posthaste-Idempotency-Key.

A key is reserved before the send path runs; the send path records the response in the same
transaction that stores the email, so a crash can never leave an email without its key or a key
without its email. A request that fails releases its reservation, so a corrected retry may reuse it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson

from posthaste.core.ids import now_ms
from posthaste.errors import (
    ConcurrentIdempotentRequests,
    InvalidIdempotencyKey,
    InvalidIdempotentRequest,
)
from posthaste.storage import idempotency as repo
from posthaste.storage.database import Database

TTL_MS = 24 * 3600 * 1000
LOCK_MS = 60 * 1000
MAX_KEY_LENGTH = 256


@dataclass(frozen=True)
class Replay:
    status: int
    body: str


def request_hash(body: object) -> str:
    """A stable hash of the request body, insensitive to key order and whitespace."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise InvalidIdempotencyKey()
    return key


class IdempotencyService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def reserve(self, team_id: str, key: str, body_hash: str) -> Replay | None:
        """None: go ahead (the key is ours). A Replay: answer with the original response."""
        now = now_ms()
        async with self.db.transaction() as tx:
            existing = await repo.try_reserve(tx, team_id, key, body_hash, now, LOCK_MS, TTL_MS)
            if existing is None:
                return None
            if existing.request_hash != body_hash:
                raise InvalidIdempotentRequest()
            if existing.state == "done":
                assert existing.response_status is not None and existing.response_body is not None
                return Replay(existing.response_status, existing.response_body)
            if existing.locked_until > now:
                raise ConcurrentIdempotentRequests()
            await repo.take_over(tx, team_id, key, now, LOCK_MS)
            return None

    async def release(self, team_id: str, key: str) -> None:
        async with self.db.transaction() as tx:
            await repo.release(tx, team_id, key)
