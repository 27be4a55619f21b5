"""Idempotency keys: one row per (team, key), kept 24 hours."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select, update

from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.tables import idempotency_keys


@dataclass(frozen=True)
class StoredKey:
    request_hash: str
    state: str
    response_status: int | None
    response_body: str | None
    locked_until: int
    expires_at: int


async def try_reserve(
    tx: Tx, team_id: str, key: str, request_hash: str, now: int, lock_ms: int, ttl_ms: int
) -> StoredKey | None:
    """Reserve the key for this request; None on success, else the existing entry."""
    await tx.conn.execute(
        delete(idempotency_keys).where(
            idempotency_keys.c.team_id == team_id,
            idempotency_keys.c.key == key,
            idempotency_keys.c.expires_at <= now,
        )
    )
    inserted = await tx.conn.execute(
        insert_for(tx, idempotency_keys)
        .values(
            team_id=team_id,
            key=key,
            request_hash=request_hash,
            state="in_flight",
            locked_until=now + lock_ms,
            expires_at=now + ttl_ms,
        )
        .on_conflict_do_nothing()
    )
    if inserted.rowcount:
        return None
    row = (
        await tx.conn.execute(
            select(idempotency_keys).where(
                idempotency_keys.c.team_id == team_id, idempotency_keys.c.key == key
            )
        )
    ).one()
    return StoredKey(
        row.request_hash,
        row.state,
        row.response_status,
        row.response_body,
        row.locked_until,
        row.expires_at,
    )


async def take_over(tx: Tx, team_id: str, key: str, now: int, lock_ms: int) -> None:
    """Re-arm an in-flight reservation whose holder vanished (its lock ran out)."""
    await tx.conn.execute(
        update(idempotency_keys)
        .where(idempotency_keys.c.team_id == team_id, idempotency_keys.c.key == key)
        .values(locked_until=now + lock_ms)
    )


async def complete(tx: Tx, team_id: str, key: str, status: int, body: str) -> None:
    await tx.conn.execute(
        update(idempotency_keys)
        .where(idempotency_keys.c.team_id == team_id, idempotency_keys.c.key == key)
        .values(state="done", response_status=status, response_body=body)
    )


async def release(tx: Tx, team_id: str, key: str) -> None:
    """Forget a reservation whose request failed, so a corrected retry may use the key."""
    await tx.conn.execute(
        delete(idempotency_keys).where(
            idempotency_keys.c.team_id == team_id,
            idempotency_keys.c.key == key,
            idempotency_keys.c.state == "in_flight",
        )
    )
