"""The event log: the one writer of the ``events`` table, and the live stream's reader.

Every event of a team (``email.*``, ``domain.*``, later ``contact.*`` and ``suppression.*``) is
stored through ``insert_events`` inside the transaction that caused it, so whatever must happen
for each event (webhook fan-out, the live stream's wake-up) happens in that same transaction and
no event is ever lost between the change and its consequences.

The stream reads events after a *position* that is safe against transactions committing out of
order (see ``tables/sending.py``): ``(txid, id)`` below the snapshot's xmin on PostgreSQL,
``rowid`` on SQLite (writers are serialised there, so rowid order is commit order).
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

from posthaste.core.ids import new_id
from posthaste.core.models import Event
from posthaste.storage import bulk, webhook_fanout
from posthaste.storage.database import EVENTS_CHANNEL, Tx
from posthaste.storage.dialects import Forms
from posthaste.storage.suppressions import Recipient
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


def new_event_row(
    team_id: str, type_: str, email_id: str | None, created_at: int, data: dict[str, Any]
) -> dict[str, Any]:
    """The row of a new event (a new id), for ``insert_event_rows``."""
    return {
        "id": new_id(),
        "team_id": team_id,
        "type": type_,
        "email_id": email_id,
        "created_at": created_at,
        "data": data,
    }


async def insert_events(
    tx: Tx, items: Sequence[Event], also: Sequence[bulk.TableRows] = ()
) -> None:
    """Store events, fan them out to webhooks, and wake the live streams; ``also``: rows of
    other tables to store with them (the emails the events are about, their jobs): on
    PostgreSQL all of it, with the transaction's wake-ups, is one statement."""
    await insert_event_rows(tx, [event_row(event) for event in items], also)


async def insert_event_rows(
    tx: Tx,
    rows: Sequence[dict[str, Any]],
    also: Sequence[bulk.TableRows] = (),
    unless_listed: Sequence[Recipient] = (),
) -> list[Recipient]:
    """``insert_events`` for events given as their rows (``event_row``, ``new_event_row``).

    ``unless_listed`` ((team, address) pairs; SQLite, with some event rows): nothing is
    written when any of them is on its team's suppression list, and those that are are
    returned (the send path's suppression check, in the writes' hop); the wake-ups the
    transaction owes are left for the caller to withdraw (``Tx.withdraw``)."""
    if not rows:
        assert not unless_listed, "the suppression check goes with the events' writes"
        await bulk.insert_tables(tx, also)
        return []
    tx.notify(EVENTS_CHANNEL)
    listed: list[Recipient] = await tx.dialect.pick(_INSERT)(tx, rows, also, unless_listed)
    return listed


async def _insert_postgres(
    tx: Tx,
    rows: Sequence[dict[str, Any]],
    also: Sequence[bulk.TableRows],
    unless_listed: Sequence[Recipient],
) -> list[Recipient]:
    assert not unless_listed, "on PostgreSQL the suppression check is a statement of its own"
    await webhook_fanout.insert_events_fanned_out(tx, rows, also)
    return []


async def _insert_sqlite(
    tx: Tx,
    rows: Sequence[dict[str, Any]],
    also: Sequence[bulk.TableRows],
    unless_listed: Sequence[Recipient],
) -> list[Recipient]:
    parts = bulk.insert_parts([*also, (events, rows)])
    items = [Event(**row) for row in rows]
    inserts = bulk.sqlite_inserts(tx, parts)
    return await webhook_fanout.insert_events_and_fan_out(tx, items, inserts, unless_listed)


_INSERT = Forms(postgresql=_insert_postgres, sqlite=_insert_sqlite)

# Where an event sits in the stream: a commit-safe ``(txid, id)`` on PostgreSQL, the rowid on
# SQLite (see the module's docstring).
_POSITION: Forms[ColumnElement[Any]] = Forms(postgresql=events.c.txid, sqlite=_ROWID)


async def tail_position(tx: Tx, team_id: str) -> tuple[Position, frozenset[str]]:
    """The position of "now" (events committed later come after it), and the ids of the
    team's events already committed that sort after it all the same.

    On PostgreSQL "now" is the snapshot's xmin: a transaction still open may commit below
    any later position, so nothing at or above xmin can be skipped. Events committed out of
    order, above xmin while an older transaction is still open, are already there and are
    named so that the stream leaves them out. SQLite commits in rowid order: none."""
    return await tx.dialect.pick(_TAIL)(tx, team_id)


async def _tail_postgres(tx: Tx, team_id: str) -> tuple[Position, frozenset[str]]:
    # One statement, so the horizon and the events above it come from one snapshot.
    above = (
        select(func.array_agg(events.c.id))
        .where(events.c.team_id == team_id, events.c.txid >= _PG_HORIZON)
        .scalar_subquery()
    )
    horizon, ids = (await tx.conn.execute(select(_PG_HORIZON, above))).one()
    return (int(horizon), ""), frozenset(ids or ())


async def _tail_sqlite(tx: Tx, team_id: str) -> tuple[Position, frozenset[str]]:
    last = (await tx.conn.execute(select(func.max(_ROWID)).select_from(events))).scalar()
    return (int(last or 0), ""), frozenset()


_TAIL = Forms(postgresql=_tail_postgres, sqlite=_tail_sqlite)


async def position_of(tx: Tx, team_id: str, event_id: str) -> Position | None:
    """Where the team's event ``event_id`` sits in the stream, or None if unknown."""
    query = select(tx.dialect.pick(_POSITION), events.c.id).where(
        events.c.team_id == team_id, events.c.id == event_id
    )
    row = (await tx.conn.execute(query)).first()
    return (int(row[0]), str(row[1])) if row else None


async def events_after(
    tx: Tx, team_id: str, after: Position, types: Sequence[str] | None, limit: int
) -> list[tuple[Event, Position]]:
    """The team's events after ``after`` in stream order, only those no later commit can precede."""
    query = tx.dialect.pick(_AFTER)(team_id, after, limit)
    if types:
        query = query.where(events.c.type.in_(types))
    rows = (await tx.conn.execute(query)).all()
    return [
        (Event(r.id, team_id, r.type, r.email_id, r.created_at, r.data), (int(r.pos), r.id))
        for r in rows
    ]


def _columns(position: ColumnElement[Any]) -> Select[Any]:
    columns = (position.label("pos"), events.c.id, events.c.type, events.c.email_id)
    return select(*columns, events.c.created_at, events.c.data)


def _after_postgres(team_id: str, after: Position, limit: int) -> Select[Any]:
    txid = events.c.txid
    later = tuple_(txid, events.c.id) > tuple_(after[0], after[1])
    settled = txid < _PG_HORIZON
    ordered = _columns(txid).where(events.c.team_id == team_id, later, settled)
    return ordered.order_by(txid, events.c.id).limit(limit)


def _after_sqlite(team_id: str, after: Position, limit: int) -> Select[Any]:
    where: ColumnElement[bool] = and_(events.c.team_id == team_id, after[0] < _ROWID)
    return _columns(_ROWID).where(where).order_by(_ROWID).limit(limit)


# The stream's page after a position: only what no later commit can precede, in stream order.
_AFTER = Forms(postgresql=_after_postgres, sqlite=_after_sqlite)
