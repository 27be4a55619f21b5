"""The retention purge's statements: small batches by time-ordered id ranges.

Every id is a UUIDv7, so "made before the cut-off" is "id below ``id_floor(cut-off)``", a range
of the primary key: no index on a time column is needed, and each batch is one short statement
(or one short transaction) that never holds the send path up for long.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, Table, delete, or_, select, text, update

from posthaste.storage.database import Tx
from posthaste.storage.dialects import Forms, among
from posthaste.storage.tables import (
    attachments,
    blobs,
    delivery_attempts,
    emails,
    events,
    received_attachments,
    received_emails,
    tls_reports,
    webhook_attempts,
    webhook_deliveries,
    webhooks,
)

# What the purge removes by id range alone, oldest first: the records of what happened.
LOG_TABLES: tuple[tuple[Table, Column[Any]], ...] = (
    (events, events.c.id),
    (delivery_attempts, delivery_attempts.c.id),
    (webhook_attempts, webhook_attempts.c.id),
    (tls_reports, tls_reports.c.id),
)


# The cluster's WAL insert position, in bytes (PostgreSQL); SQLite has no such log to spare.
_WAL_POSITION = Forms(
    postgresql=text("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"),
    sqlite=None,
)


async def wal_position(tx: Tx) -> int | None:
    """Where the database's write-ahead log is (bytes since its start), or None where it has
    none to read (SQLite). Two readings a batch apart are what the cluster wrote meanwhile: the
    purge's own WAL and whatever else was written beside it."""
    query = tx.dialect.pick(_WAL_POSITION)
    if query is None:
        return None
    return int((await tx.conn.execute(query)).scalar_one())


async def sent_page(tx: Tx, after: str, below: str, limit: int) -> list[Any]:
    """The next ``limit`` emails in id order after ``after`` and below ``below``."""
    query = (
        select(emails.c.id, emails.c.status, emails.c.raw_blob_id)
        .where(emails.c.id > after, emails.c.id < below)
        .order_by(emails.c.id)
        .limit(limit)
    )
    return list((await tx.conn.execute(query)).all())


async def received_page(tx: Tx, after: str, below: str, limit: int) -> list[Any]:
    query = (
        select(received_emails.c.id, received_emails.c.raw_blob_id)
        .where(received_emails.c.id > after, received_emails.c.id < below)
        .order_by(received_emails.c.id)
        .limit(limit)
    )
    return list((await tx.conn.execute(query)).all())


async def purge_sent_content(tx: Tx, email_ids: Sequence[str], raw_blob_ids: Sequence[str]) -> int:
    """Drop the bodies, the raw message and the attachments of these emails; their rows (status,
    addresses, subject, tags) stay. The raw message's id stays too, so that the API can say the
    message is gone by retention. Returns how many blobs were deleted."""
    query = select(attachments.c.blob_id).where(among(tx, attachments.c.email_id, email_ids))
    blob_ids = [*raw_blob_ids, *(await tx.conn.execute(query)).scalars()]
    deleted = await _delete_blobs(tx, blob_ids)
    await tx.conn.execute(delete(attachments).where(among(tx, attachments.c.email_id, email_ids)))
    await tx.conn.execute(
        update(emails)
        .where(
            among(tx, emails.c.id, email_ids),
            or_(emails.c.html.is_not(None), emails.c.text.is_not(None)),
        )
        .values(html=None, text=None)
    )
    return deleted


async def purge_received_content(
    tx: Tx, email_ids: Sequence[str], raw_blob_ids: Sequence[str]
) -> int:
    """The same for received mail: bodies, raw message and the attachment list (read from the
    raw message) go; the envelope, addresses and subject stay."""
    deleted = await _delete_blobs(tx, raw_blob_ids)
    await tx.conn.execute(
        delete(received_attachments).where(among(tx, received_attachments.c.email_id, email_ids))
    )
    await tx.conn.execute(
        update(received_emails)
        .where(
            among(tx, received_emails.c.id, email_ids),
            or_(received_emails.c.html.is_not(None), received_emails.c.text.is_not(None)),
        )
        .values(html=None, text=None)
    )
    return deleted


async def _delete_blobs(tx: Tx, blob_ids: Sequence[str]) -> int:
    if not blob_ids:
        return 0
    result = await tx.conn.execute(delete(blobs).where(among(tx, blobs.c.id, blob_ids)))
    return int(result.rowcount)


async def delete_below(tx: Tx, table: Table, key: Column[Any], below: str, limit: int) -> int:
    """Delete up to ``limit`` of the oldest rows whose ``key`` (a UUIDv7) is below ``below``."""
    oldest = select(key).where(key < below).order_by(key).limit(limit).scalar_subquery()
    result = await tx.conn.execute(delete(table).where(key.in_(oldest)))
    return int(result.rowcount)


async def webhook_ids(tx: Tx) -> list[str]:
    return list((await tx.conn.execute(select(webhooks.c.id))).scalars())


async def delete_deliveries_below(tx: Tx, webhook_id: str, below: str, limit: int) -> int:
    """An endpoint's delivery records of events older than the cut-off (its key leads with the
    endpoint, then the event's id: a range of the primary key)."""
    d = webhook_deliveries.c
    oldest = (
        select(d.event_id)
        .where(d.webhook_id == webhook_id, d.event_id < below)
        .order_by(d.event_id)
        .limit(limit)
        .scalar_subquery()
    )
    query = delete(webhook_deliveries).where(d.webhook_id == webhook_id, d.event_id.in_(oldest))
    return int((await tx.conn.execute(query)).rowcount)
