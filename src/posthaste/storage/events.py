"""The event log: the one writer of the ``events`` table, and the live stream's reader.

Every event of a team (``email.*``, ``domain.*``, later ``contact.*`` and ``suppression.*``) is
stored through ``insert_events`` inside the transaction that caused it, so whatever must happen
for each event (webhook fan-out, the live stream's wake-up) happens in that same transaction and
no event is ever lost between the change and its consequences.

The stream reads events after a *position* that is safe against transactions committing out of
order (see ``tables.py``): ``(txid, id)`` below the snapshot's xmin on PostgreSQL, ``rowid`` on
SQLite (writers are serialised there, so rowid order is commit order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    and_,
    func,
    literal_column,
    select,
    text,
    tuple_,
)

from posthaste.core.models import Event
from posthaste.storage import bulk
from posthaste.storage import webhooks as webhooks_repo
from posthaste.storage._dialect import is_postgres
from posthaste.storage.database import EVENTS_CHANNEL, Tx
from posthaste.storage.tables import events

Position = tuple[int, str]
_ROWID: ColumnElement[int] = literal_column("events.rowid", BigInteger)
_PG_HORIZON = text("(pg_snapshot_xmin(pg_current_snapshot())::text::bigint)")


def event_row(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "team_id": event.team_id,
        "type": event.type,
        "email_id": event.email_id,
        "created_at": event.created_at,
        "data": event.data,
    }


async def insert_events(
    tx: Tx, items: Sequence[Event], also: Sequence[bulk.TableRows] = ()
) -> None:
    """Store events, fan them out to webhooks, and wake the live streams; ``also``: rows of
    other tables to store with them (the emails the events are about, their jobs): on
    PostgreSQL all of it, with the transaction's wake-ups, is one statement."""
    if not items:
        await bulk.insert_tables(tx, also)
        return
    tx.notify(EVENTS_CHANNEL)
    rows = [event_row(event) for event in items]
    if is_postgres(tx):
        await webhooks_repo.insert_events_fanned_out(tx, rows, also)
    else:
        await bulk.insert_tables(tx, also)
        await bulk.insert_rows(tx, events, rows)
        await webhooks_repo.fan_out(tx, items)


def _position_column(tx: Tx) -> Any:
    return events.c.txid if is_postgres(tx) else _ROWID


async def tail_position(tx: Tx) -> Position:
    """The position of "now": events committed later come after it."""
    if is_postgres(tx):
        horizon = (await tx.conn.execute(select(_PG_HORIZON))).scalar_one()
        return int(horizon), ""
    last = (await tx.conn.execute(select(func.max(_ROWID)).select_from(events))).scalar()
    return int(last or 0), ""


async def position_of(tx: Tx, team_id: str, event_id: str) -> Position | None:
    """Where the team's event ``event_id`` sits in the stream, or None if unknown."""
    query = select(_position_column(tx), events.c.id).where(
        events.c.team_id == team_id, events.c.id == event_id
    )
    row = (await tx.conn.execute(query)).first()
    return (int(row[0]), str(row[1])) if row else None


async def events_after(
    tx: Tx, team_id: str, after: Position, types: Sequence[str] | None, limit: int
) -> list[tuple[Event, Position]]:
    """The team's events after ``after`` in stream order, only those no later commit can precede."""
    query = _stream_query(tx, team_id, after, limit)
    if types:
        query = query.where(events.c.type.in_(types))
    rows = (await tx.conn.execute(query)).all()
    return [
        (Event(r.id, team_id, r.type, r.email_id, r.created_at, r.data), (int(r.pos), r.id))
        for r in rows
    ]


def _stream_query(tx: Tx, team_id: str, after: Position, limit: int) -> Select[Any]:
    pos = _position_column(tx)
    columns = (pos.label("pos"), events.c.id, events.c.type, events.c.email_id)
    base = select(*columns, events.c.created_at, events.c.data)
    if not is_postgres(tx):
        where: ColumnElement[bool] = and_(events.c.team_id == team_id, after[0] < _ROWID)
        return base.where(where).order_by(_ROWID).limit(limit)
    txid = events.c.txid
    later = tuple_(txid, events.c.id) > tuple_(after[0], after[1])
    settled = txid < _PG_HORIZON
    ordered = base.where(events.c.team_id == team_id, later, settled)
    return ordered.order_by(txid, events.c.id).limit(limit)
