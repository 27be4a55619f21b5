"""Delivery attempts and their SMTP transcripts (``GET /emails/{id}/attempts``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from posthaste.core.delivery import DeliveryAttempt
from posthaste.storage import bulk
from posthaste.storage.database import Tx
from posthaste.storage.tables import delivery_attempts


def _attempt(row: Any) -> DeliveryAttempt:
    return DeliveryAttempt(
        id=row.id,
        team_id=row.team_id,
        email_id=row.email_id,
        attempt=row.attempt,
        attempted_at=row.attempted_at,
        transport=row.transport,
        host=row.host,
        recipients=list(row.recipients),
        replies=list(row.replies),
        transcript=list(row.transcript),
        duration_ms=row.duration_ms,
    )


def attempt_row(item: DeliveryAttempt) -> dict[str, Any]:
    return {
        "id": item.id,
        "team_id": item.team_id,
        "email_id": item.email_id,
        "attempt": item.attempt,
        "attempted_at": item.attempted_at,
        "transport": item.transport,
        "host": item.host,
        "recipients": item.recipients,
        "replies": item.replies,
        "transcript": item.transcript,
        "duration_ms": item.duration_ms,
    }


def inserted(items: Sequence[DeliveryAttempt]) -> bulk.TableRows:
    """Attempts to insert with other rows in one statement (``bulk.insert_tables``)."""
    return delivery_attempts, [attempt_row(i) for i in items]


async def insert_attempts(tx: Tx, items: Sequence[DeliveryAttempt]) -> None:
    """Store attempts (one statement) in the caller's transaction."""
    if items:
        await bulk.insert_rows(tx, delivery_attempts, [attempt_row(i) for i in items])


async def list_attempts(tx: Tx, team_id: str, email_id: str) -> list[DeliveryAttempt]:
    """Oldest first."""
    query = (
        select(delivery_attempts)
        .where(delivery_attempts.c.team_id == team_id, delivery_attempts.c.email_id == email_id)
        .order_by(delivery_attempts.c.id)
    )
    return [_attempt(r) for r in await tx.conn.execute(query)]
