"""Received mail: its rows, the raw message's blob, and who receives mail for a domain."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from posthaste.core.cursors import Position
from posthaste.core.domains import RecordStatus
from posthaste.core.ids import is_uuid
from posthaste.core.inbound import ReceivedAttachment, ReceivedEmail
from posthaste.core.models import Event
from posthaste.storage import blobs as blobs_repo
from posthaste.storage import events as events_repo
from posthaste.storage.database import Tx
from posthaste.storage.domains import name_owner
from posthaste.storage.keyset import keyset_page
from posthaste.storage.tables import (
    blobs,
    domains,
    received_attachments,
    received_emails,
    received_recipients,
)

RECEIVED = "received"
_FIELDS = [c for c in received_emails.c]


@dataclass(frozen=True)
class ReceivedFilter:
    to: str | None = None
    from_: str | None = None
    after: int | None = None
    before: int | None = None


async def receiving_team(tx: Tx, name: str) -> str | None:
    """The team that receives mail for ``name``: its owner (the claimant, else the first to
    verify it), when that team's domain has receiving on and its MX record verified."""
    owner = await name_owner(tx, name)
    if owner is None:
        return None
    query = select(domains.c.receiving, domains.c.records, domains.c.verified_at).where(
        domains.c.team_id == owner, domains.c.name == name
    )
    row = (await tx.conn.execute(query)).first()
    if row is None or not row.receiving or row.verified_at is None:
        return None
    verified = RecordStatus.VERIFIED.value
    mx = [r for r in row.records if r.get("record") == "Receiving"]
    return owner if mx and all(r.get("status") == verified for r in mx) else None


@dataclass(frozen=True)
class Stored:
    """A received message to store: its record, raw bytes (in parts, stored as one blob),
    recipients (lookup form), events."""

    item: ReceivedEmail
    raw: Sequence[bytes]
    addresses: Sequence[str] = ()
    events: Sequence[Event] = ()


async def store_received(tx: Tx, stored: Sequence[Stored]) -> None:
    """Raw messages (once each), records, recipients, attachments and events of many messages:
    one statement per table (a large raw message on PostgreSQL: in pieces, before it; see
    ``storage.blobs``)."""
    rows: dict[Any, list[dict[str, Any]]] = {
        table: [] for table in (blobs, received_emails, received_recipients, received_attachments)
    }
    for one in stored:
        item = one.item
        rows[blobs].append(
            {
                "id": item.raw_blob_id,
                "team_id": item.team_id,
                "data": one.raw,
                "created_at": item.created_at,
            }
        )
        rows[received_emails].append(_row(item))
        rows[received_recipients].extend(_recipient(item, a) for a in one.addresses)
        rows[received_attachments].extend(_attachment_row(item, a) for a in item.attachments)
    events = [event for one in stored for event in one.events]

    async def statement(blob_rows: list[dict[str, Any]]) -> None:
        also = [(t, r) for t, r in {**rows, blobs: blob_rows}.items() if r]
        await events_repo.insert_events(tx, events, also)

    await blobs_repo.store_blobs_with(tx, rows[blobs], statement)


def _row(item: ReceivedEmail) -> dict[str, Any]:
    return {c.name: getattr(item, c.name) for c in _FIELDS}


def _recipient(item: ReceivedEmail, address: str) -> dict[str, Any]:
    return {
        "email_id": item.id,
        "address": address,
        "team_id": item.team_id,
        "created_at": item.created_at,
    }


def _attachment_row(item: ReceivedEmail, a: ReceivedAttachment) -> dict[str, Any]:
    return {
        "id": a.id,
        "email_id": item.id,
        "team_id": item.team_id,
        "position": a.position,
        "part": a.part,
        "filename": a.filename,
        "content_type": a.content_type,
        "size": a.size,
        "content_id": a.content_id,
        "disposition": a.disposition,
    }


def _received(row: Any, attachments: list[ReceivedAttachment]) -> ReceivedEmail:
    values = {c.name: getattr(row, c.name) for c in _FIELDS}
    return ReceivedEmail(**values, attachments=attachments)


def _attachment(row: Any) -> ReceivedAttachment:
    return ReceivedAttachment(
        row.id,
        row.email_id,
        row.position,
        row.part,
        row.filename,
        row.content_type,
        row.size,
        row.content_id,
        row.disposition,
    )


async def get_received(tx: Tx, team_id: str, email_id: str) -> ReceivedEmail | None:
    """The team's received email (not a report kept for inspection) with its attachments."""
    if not is_uuid(email_id):
        return None
    r = received_emails
    query = select(*_FIELDS).where(
        r.c.team_id == team_id, r.c.id == email_id.lower(), r.c.kind == RECEIVED
    )
    row = (await tx.conn.execute(query)).first()
    if row is None:
        return None
    found = await attachments_of(tx, team_id, [row.id])
    return _received(row, found[row.id])


async def list_received(
    tx: Tx,
    team_id: str,
    flt: ReceivedFilter,
    position: Position | None,
    limit: int,
    *,
    backwards: bool = False,
) -> list[ReceivedEmail]:
    """Newest first, past ``position`` (storage.keyset), with their attachments."""
    r = received_emails
    query = select(*_FIELDS).where(r.c.team_id == team_id, r.c.kind == RECEIVED)
    created_at, row_id = r.c.created_at, r.c.id
    if flt.to:
        rr = received_recipients
        query = query.join(rr, rr.c.email_id == r.c.id).where(
            rr.c.team_id == team_id, rr.c.address == flt.to
        )
        created_at, row_id = rr.c.created_at, rr.c.email_id
    if flt.from_:
        query = query.where(r.c.from_lookup == flt.from_)
    if flt.after is not None:
        query = query.where(created_at > flt.after)
    if flt.before is not None:
        query = query.where(created_at < flt.before)
    query = keyset_page(
        query,
        created_at,
        row_id,
        newest_first=True,
        position=position,
        backwards=backwards,
        limit=limit,
    )
    rows = list(await tx.conn.execute(query))
    found = await attachments_of(tx, team_id, [row.id for row in rows])
    return [_received(row, found[row.id]) for row in rows]


async def attachments_of(
    tx: Tx, team_id: str, email_ids: Sequence[str]
) -> dict[str, list[ReceivedAttachment]]:
    found: dict[str, list[ReceivedAttachment]] = {email_id: [] for email_id in email_ids}
    if not email_ids:
        return found
    a = received_attachments
    query = (
        select(a)
        .where(a.c.team_id == team_id, a.c.email_id.in_(list(email_ids)))
        .order_by(a.c.email_id, a.c.position)
    )
    for row in await tx.conn.execute(query):
        found[row.email_id].append(_attachment(row))
    return found


async def find_attachment(
    tx: Tx, team_id: str, attachment_id: str
) -> tuple[ReceivedAttachment, str] | None:
    """The team's received attachment and the blob id of the raw message that holds it."""
    if not is_uuid(attachment_id):
        return None
    a, r = received_attachments, received_emails
    query = (
        select(a, r.c.raw_blob_id)
        .join(r, r.c.id == a.c.email_id)
        .where(a.c.team_id == team_id, a.c.id == attachment_id.lower(), r.c.team_id == team_id)
    )
    row = (await tx.conn.execute(query)).first()
    return None if row is None else (_attachment(row), row.raw_blob_id)
