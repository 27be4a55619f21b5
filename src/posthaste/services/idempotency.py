"""Idempotency keys of the send path: reserved before it runs, replayed or released after.

A key is reserved in its own transaction; the send path records the response in the same
transaction that stores the email, so a crash can never leave an email without its key or a key
without its email. A request that fails releases its reservation, so a corrected retry may reuse
it. Only ``services.sending`` uses this: an entry point hands its key to ``accept()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from posthaste.core.idempotency import IdempotencyKey
from posthaste.core.ids import now_ms
from posthaste.errors import ConcurrentIdempotentRequests, InvalidIdempotentRequest
from posthaste.storage import idempotency as repo
from posthaste.storage.database import Database, Tx

TTL_MS = 24 * 3600 * 1000
LOCK_MS = 60 * 1000


@dataclass(frozen=True)
class Replay:
    """The original answer to a request sent again with its key: the accepted email's id and
    the response body as first returned (PRODUCT §5: the original response again)."""

    id: str
    body: str


class IdempotencyService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def reserve(self, team_id: str, key: IdempotencyKey) -> Replay | None:
        """None: go ahead (the key is ours). A Replay: answer with the original response."""
        now = now_ms()
        async with self.db.transaction() as tx:
            existing = await repo.try_reserve(
                tx, team_id, key.key, key.fingerprint, now, LOCK_MS, TTL_MS
            )
            if existing is None:
                return None
            if existing.request_hash != key.fingerprint:
                raise InvalidIdempotentRequest()
            if existing.state == "done":
                assert existing.response_body is not None
                body = existing.response_body
                return Replay(str(orjson.loads(body)["id"]), body)
            if existing.locked_until > now:
                raise ConcurrentIdempotentRequests()
            await repo.take_over(tx, team_id, key.key, now, LOCK_MS)
            return None

    @staticmethod
    async def record(tx: Tx, team_id: str, key: IdempotencyKey, body: str) -> None:
        """Keep the response of the request the key reserved, in the transaction storing it."""
        await repo.complete(tx, team_id, key.key, 200, body)

    async def release(self, team_id: str, key: IdempotencyKey) -> None:
        async with self.db.transaction() as tx:
            await repo.release(tx, team_id, key.key)
