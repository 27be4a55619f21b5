"""Webhook fan-out: each event becomes one delivery per enabled endpoint of its team that
subscribes to its type, in the transaction that records the event (``events.insert_events``).

Two forms, which ``events.insert_events`` picks by dialect: ``insert_events_and_fan_out``
stores the events with the rows alongside and reads the endpoints in one hop to the
connection's thread, then inserts the deliveries if there are any (SQLite);
``insert_events_fanned_out`` does all of it, with the wake-ups, in one statement (PostgreSQL).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy.engine import Dialect

from posthaste.core.models import Event
from posthaste.core.webhooks import DeliveryStatus
from posthaste.storage import bulk
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import WEBHOOKS_CHANNEL, Tx
from posthaste.storage.suppressions import Recipient
from posthaste.storage.tables import events, webhook_deliveries

CHANNEL = WEBHOOKS_CHANNEL
PENDING = DeliveryStatus.PENDING.value


async def insert_events_and_fan_out(
    tx: Tx,
    items: Sequence[Event],
    inserts: Sequence[bulk.SqliteInsert],
    unless_listed: Sequence[Recipient] = (),
) -> list[Recipient]:
    """SQLite: run ``inserts`` (the events' rows and what they record, ``bulk.sqlite_inserts``)
    and read the endpoints of the events' teams in one hop to the connection's thread; then
    one delivery per enabled endpoint subscribed to each event's type, in a second hop only
    where there are any. A team without webhooks costs one indexed lookup and nothing else.

    ``unless_listed``: in the same hop, first, which of those recipients are on their team's
    suppression list; when any is, nothing is written and they are returned."""
    team_ids = sorted({event.team_id for event in items})
    work = functools.partial(_insert_and_read_endpoints, inserts, team_ids, unless_listed)
    listed, subscribed = await tx.run_sqlite(work)
    if listed:
        return listed
    rows = [
        _delivery_row(hook_id, event)
        for event in items
        for hook_id, team_id, types in subscribed
        if team_id == event.team_id and event.type in types
    ]
    if rows:
        await bulk.insert_rows(tx, webhook_deliveries, rows)
        tx.notify(CHANNEL)
    return []


def _insert_and_read_endpoints(
    inserts: Sequence[bulk.SqliteInsert],
    team_ids: Sequence[str],
    unless_listed: Sequence[Recipient],
    connection: sqlite3.Connection,
) -> tuple[list[Recipient], list[tuple[str, str, list[str]]]]:
    """On the connection's thread: the listed recipients among ``unless_listed`` (and, if
    any, nothing else); else the inserts, then each enabled endpoint of ``team_ids`` as (id,
    team, event types)."""
    listed = suppressions_repo.listed_on(connection, unless_listed) if unless_listed else []
    if listed:
        return listed, []
    bulk.run_sqlite_inserts(inserts, connection)
    cursor = connection.execute(_sqlite_endpoints_sql(len(team_ids)), team_ids)
    return [], [(hook_id, team_id, orjson.loads(types)) for hook_id, team_id, types in cursor]


@functools.cache
def _sqlite_endpoints_sql(teams: int) -> str:
    marks = ", ".join("?" for _ in range(teams))
    return f"SELECT id, team_id, events FROM webhooks WHERE team_id IN ({marks}) AND enabled = 1"


async def insert_events_fanned_out(
    tx: Tx, rows: Sequence[Mapping[str, Any]], also: Sequence[bulk.TableRows] = ()
) -> None:
    """PostgreSQL: store event rows (``events.event_row``) and ``fan_out`` their deliveries in
    one statement (the endpoints are read by the statement itself, in the same transaction),
    with ``also``'s rows of other tables (what the events record, as ``bulk.insert_tables``)
    and the ``pg_notify`` of every wake-up the transaction owes inside it so far (``Tx.unsent``:
    the caches', rarely any): one round trip. The dispatchers are woken after commit."""
    before = bulk.insert_parts(also)
    columns = tuple(rows[0])
    channels = tx.unsent()
    as_json = bulk.in_json([*before, (events, columns, rows)])
    sql, before_sources, stored = _events_fan_out_sql(
        tx.conn.dialect, bulk.shape_of(before), columns, len(channels), as_json, len(rows) == 1
    )
    params = (
        *bulk.insert_params(before, before_sources),
        *stored.encode(rows),
        *channels,
    )
    # Inserts, and the team's endpoints read by team: the same plan whatever the values.
    [(fanned, *_)] = await tx.fetch_pg(sql, *params, generic=True)
    for channel in channels:
        tx.notify(channel, sent=True)
    if fanned:
        tx.notify(CHANNEL)  # told after commit (``dialects.Notifier``)


@functools.cache
def _events_fan_out_sql(
    dialect: Dialect,
    before: bulk.Shape,
    columns: tuple[str, ...],
    channels: int,
    as_json: bool,
    one_event: bool,
) -> tuple[str, list[bulk.Source], bulk.Source]:
    inserts, before_sources = bulk.inserts(dialect, before, as_json)
    first = 1 + sum(found.params for found in before_sources)
    stored = bulk.source(dialect, events, columns, first, as_json=as_json, one_row=one_event)
    first += stored.params
    earlier = f"{bulk.with_parts(inserts)}," if inserts else ""
    notify = "".join(f", pg_notify(${first + n}, '')" for n in range(channels))
    sql = f"""
        WITH {earlier} stored AS (
            {bulk.insert_into(dialect, events, columns)}
            SELECT * FROM {stored.sql}
            RETURNING id, team_id, type, created_at
        ), fanned AS (
            INSERT INTO webhook_deliveries (webhook_id, event_id, team_id, status, attempts,
                due_at, next_attempt_at, claims, replay_status, created_at)
            SELECT w.id, s.id, s.team_id, '{PENDING}', 0, s.created_at, s.created_at, 0, NULL,
                s.created_at
            FROM stored s JOIN webhooks w ON w.team_id = s.team_id AND w.enabled
            WHERE w.events::jsonb @> jsonb_build_array(s.type)
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM fanned){notify}
    """
    return sql, before_sources, stored


def _delivery_row(webhook_id: str, event: Event) -> dict[str, Any]:
    return {
        "webhook_id": webhook_id,
        "event_id": event.id,
        "team_id": event.team_id,
        "status": PENDING,
        "attempts": 0,
        "due_at": event.created_at,
        "next_attempt_at": event.created_at,
        "claims": 0,
        "replay_status": None,
        "created_at": event.created_at,
    }
