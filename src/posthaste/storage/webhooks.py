"""Webhook endpoints, their deliveries (one per event and endpoint) and delivery attempts.

A delivery row is due when ``due_at <= now``; the dispatcher claims it by pushing ``due_at`` out
by a lease and bumping ``claims`` (the fencing token), exactly like the job queue, so a crashed
dispatcher's deliveries fall due again by themselves. Secrets are stored as SecretBox text.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import (
    bindparam,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.engine import Dialect

from posthaste.core.models import Event
from posthaste.core.webhooks import DeliveryStatus, Webhook, WebhookAttempt, WebhookDelivery
from posthaste.storage import bulk
from posthaste.storage.database import WEBHOOKS_CHANNEL, Database, Tx
from posthaste.storage.dialects import Forms, among
from posthaste.storage.tables import events, webhook_attempts, webhook_deliveries, webhooks

CHANNEL = WEBHOOKS_CHANNEL
PENDING = DeliveryStatus.PENDING.value


@dataclass(frozen=True)
class Target:
    """What the dispatcher needs of an endpoint: where, whether, and the sealed secrets."""

    id: str
    team_id: str
    endpoint: str
    enabled: bool
    secret: str
    previous_secret: str | None
    previous_secret_until: int | None


@dataclass(frozen=True)
class Claimed:
    webhook_id: str
    event_id: str
    team_id: str
    attempts: int
    claims: int
    replay_status: str | None


@dataclass(frozen=True)
class Claim:
    """A claimed delivery with what posting it needs: its endpoint and its event (None when
    either is gone)."""

    delivery: Claimed
    target: Target | None
    event: Event | None


@dataclass(frozen=True)
class Outcome:
    """A finished attempt and what it leaves the delivery as."""

    claimed: Claimed
    attempt: WebhookAttempt
    status: DeliveryStatus
    next_attempt_at: int | None


def _webhook(row: Any) -> Webhook:
    return Webhook(
        row.id,
        row.team_id,
        row.endpoint,
        list(row.events),
        bool(row.enabled),
        row.created_at,
        row.updated_at,
    )


def _target(row: Any) -> Target:
    return Target(
        row.id,
        row.team_id,
        row.endpoint,
        bool(row.enabled),
        row.secret,
        row.previous_secret,
        row.previous_secret_until,
    )


# --- endpoints ------------------------------------------------------------------------------


async def insert_webhook(tx: Tx, hook: Webhook, sealed_secret: str) -> None:
    await tx.conn.execute(
        webhooks.insert().values(
            id=hook.id,
            team_id=hook.team_id,
            endpoint=hook.endpoint,
            events=hook.events,
            enabled=hook.enabled,
            secret=sealed_secret,
            created_at=hook.created_at,
            updated_at=hook.updated_at,
        )
    )


async def get_webhook(tx: Tx, team_id: str, webhook_id: str) -> Webhook | None:
    query = select(webhooks).where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
    row = (await tx.conn.execute(query)).first()
    return _webhook(row) if row else None


async def list_webhooks(tx: Tx, team_id: str) -> list[Webhook]:
    query = (
        select(webhooks)
        .where(webhooks.c.team_id == team_id)
        .order_by(webhooks.c.created_at, webhooks.c.id)
    )
    return [_webhook(row) for row in await tx.conn.execute(query)]


async def update_webhook(tx: Tx, team_id: str, webhook_id: str, **values: Any) -> bool:
    query = (
        update(webhooks)
        .where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
        .values(**values)
    )
    return bool((await tx.conn.execute(query)).rowcount)


async def delete_webhook(tx: Tx, team_id: str, webhook_id: str) -> bool:
    query = delete(webhooks).where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
    return bool((await tx.conn.execute(query)).rowcount)


async def get_target(tx: Tx, team_id: str, webhook_id: str) -> Target | None:
    query = select(webhooks).where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
    row = (await tx.conn.execute(query)).first()
    return _target(row) if row else None


async def targets(tx: Tx, webhook_ids: Collection[str]) -> dict[str, Target]:
    """The endpoints of claimed deliveries (SQLite's claim: its single writer keeps them from
    being deleted until the claim commits)."""
    query = select(webhooks).where(among(tx, webhooks.c.id, webhook_ids))
    return {row.id: _target(row) for row in await tx.conn.execute(query)}


# --- fan-out --------------------------------------------------------------------------------


async def fan_out(tx: Tx, items: Sequence[Event]) -> None:
    """One delivery per enabled endpoint subscribed to each event's type; two statements at most.

    A team without webhooks costs one indexed lookup and nothing else.
    """
    team_ids = {event.team_id for event in items}
    query = select(webhooks.c.id, webhooks.c.team_id, webhooks.c.events).where(
        webhooks.c.team_id.in_(team_ids), webhooks.c.enabled.is_(True)
    )
    subscribed = (await tx.conn.execute(query)).all()
    if not subscribed:
        return
    rows = [
        _delivery_row(hook.id, event)
        for event in items
        for hook in subscribed
        if hook.team_id == event.team_id and event.type in hook.events
    ]
    if rows:
        await bulk.insert_rows(tx, webhook_deliveries, rows)
        tx.notify(CHANNEL)


async def insert_events_fanned_out(
    tx: Tx, rows: Sequence[Mapping[str, Any]], also: Sequence[bulk.TableRows] = ()
) -> None:
    """PostgreSQL: store event rows (``events.event_row``) and ``fan_out`` their deliveries in
    one statement (the endpoints are read by the statement itself, in the same transaction),
    with ``also``'s rows of other tables (what the events record, as ``bulk.insert_tables``)
    and the ``pg_notify`` of every wake-up the transaction owes so far: one round trip."""
    before = bulk.insert_parts(also)
    columns = tuple(rows[0])
    channels = tx.unsent()
    sql, before_processors, processors = _events_fan_out_sql(
        tx.conn.dialect, bulk.shape_of(before), columns, len(channels)
    )
    params = (
        *bulk.insert_params(before, before_processors),
        *bulk.arrays(rows, columns, processors),
        *channels,
        CHANNEL,
    )
    [(fanned, *_)] = await tx.fetch_pg(sql, *params)
    for channel in channels:
        tx.notify(channel, sent=True)
    if fanned:
        tx.notify(CHANNEL, sent=True)


@functools.cache
def _events_fan_out_sql(
    dialect: Dialect, before: bulk.Shape, columns: tuple[str, ...], channels: int
) -> tuple[str, list[list[Any]], list[Any]]:
    inserts, before_processors = bulk.inserts(dialect, before)
    first = 1 + sum(len(part_columns) for _, part_columns in before)
    source, processors = bulk.unnest(dialect, events, columns, first)
    first += len(columns)
    earlier = f"{bulk.with_parts(inserts)}," if inserts else ""
    notify = "".join(f", pg_notify(${first + n}, '')" for n in range(channels))
    sql = f"""
        WITH {earlier} stored AS (
            {bulk.insert_into(dialect, events, columns)}
            SELECT * FROM {source}
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
        SELECT (SELECT count(*) FROM fanned){notify},
            CASE WHEN EXISTS (SELECT FROM fanned) THEN pg_notify(${first + channels}, '') END
    """
    return sql, before_processors, processors


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


# --- reading deliveries and attempts --------------------------------------------------------

_DELIVERY_COLUMNS = (
    webhook_deliveries.c.event_id,
    webhook_deliveries.c.webhook_id,
    events.c.type,
    events.c.created_at,
    events.c.data,
    webhook_deliveries.c.status,
    webhook_deliveries.c.attempts,
    webhook_deliveries.c.next_attempt_at,
)


def _delivery(row: Any) -> WebhookDelivery:
    status = DeliveryStatus(row.status)
    next_at = row.next_attempt_at if status is DeliveryStatus.PENDING else None
    return WebhookDelivery(
        row.event_id,
        row.webhook_id,
        row.type,
        row.created_at,
        row.data,
        status,
        row.attempts,
        next_at,
    )


def _deliveries_query(team_id: str, webhook_id: str) -> Any:
    return (
        select(*_DELIVERY_COLUMNS)
        .join(events, events.c.id == webhook_deliveries.c.event_id)
        .where(
            webhook_deliveries.c.team_id == team_id, webhook_deliveries.c.webhook_id == webhook_id
        )
    )


async def iter_deliveries(
    tx: Tx, team_id: str, webhook_id: str, page: int = 500
) -> AsyncIterator[WebhookDelivery]:
    """Every delivery of an endpoint, newest first, read in keyset pages (flat memory)."""
    before: str | None = None
    while True:
        query = _deliveries_query(team_id, webhook_id)
        if before is not None:
            query = query.where(webhook_deliveries.c.event_id < before)
        query = query.order_by(webhook_deliveries.c.event_id.desc()).limit(page)
        rows = (await tx.conn.execute(query)).all()
        for row in rows:
            yield _delivery(row)
        if len(rows) < page:
            return
        before = rows[-1].event_id


async def get_delivery(
    tx: Tx, team_id: str, webhook_id: str, event_id: str
) -> WebhookDelivery | None:
    query = _deliveries_query(team_id, webhook_id).where(webhook_deliveries.c.event_id == event_id)
    row = (await tx.conn.execute(query)).first()
    return _delivery(row) if row else None


async def list_attempts(
    tx: Tx, team_id: str, webhook_id: str, event_id: str
) -> list[WebhookAttempt]:
    query = (
        select(webhook_attempts)
        .where(
            webhook_attempts.c.team_id == team_id,
            webhook_attempts.c.webhook_id == webhook_id,
            webhook_attempts.c.event_id == event_id,
        )
        .order_by(webhook_attempts.c.id)
    )
    return [
        WebhookAttempt(
            r.id,
            r.webhook_id,
            r.event_id,
            r.attempted_at,
            r.status_code,
            bool(r.success),
            r.error,
            r.duration_ms,
            r.response_body,
        )
        for r in await tx.conn.execute(query)
    ]


# --- scheduling -----------------------------------------------------------------------------


async def replay(tx: Tx, delivery: WebhookDelivery, now: int) -> None:
    """Make a delivery due now; an ended one returns to its end status if the replay fails."""
    values: dict[str, Any] = {"due_at": now, "next_attempt_at": now}
    if delivery.status is not DeliveryStatus.PENDING:
        values.update(status=PENDING, replay_status=delivery.status.value)
    query = (
        update(webhook_deliveries)
        .where(
            webhook_deliveries.c.webhook_id == delivery.webhook_id,
            webhook_deliveries.c.event_id == delivery.event_id,
        )
        .values(**values)
    )
    await tx.conn.execute(query)
    tx.notify(CHANNEL)


async def resume_paused(tx: Tx, webhook_id: str) -> None:
    """Re-enabled endpoint: its pending deliveries fall due again on their schedule."""
    query = (
        update(webhook_deliveries)
        .where(
            webhook_deliveries.c.webhook_id == webhook_id,
            webhook_deliveries.c.status == PENDING,
            webhook_deliveries.c.due_at.is_(None),
        )
        .values(due_at=webhook_deliveries.c.next_attempt_at)
    )
    await tx.conn.execute(query)
    tx.notify(CHANNEL)


async def claim_due(
    db: Database, now: int, lease_ms: int, room: dict[str, int], default_room: int, limit: int
) -> list[Claim]:
    """Claim up to ``limit`` due deliveries, at most ``room[id]`` (else ``default_room``) per
    endpoint, with their endpoints and events.

    PostgreSQL: ONE statement on the driver connection (choose, lease, read endpoint and event),
    which commits by itself; SQLite: ``claim`` and two reads in one transaction.
    """
    return await db.dialect.pick(_CLAIM_DUE)(db, now, lease_ms, room, default_room, limit)


async def _claim_due_postgres(
    db: Database, now: int, lease_ms: int, room: dict[str, int], default_room: int, limit: int
) -> list[Claim]:
    full = [webhook_id for webhook_id, free in room.items() if free <= 0]
    async with db.driver() as conn:
        rows = await conn.fetch(
            _CLAIM_PG,
            now,
            now + lease_ms,
            list(room),
            list(room.values()),
            default_room,
            limit,
            full,
        )
    return _claims_pg(rows)


async def _claim_due_sqlite(
    db: Database, now: int, lease_ms: int, room: dict[str, int], default_room: int, limit: int
) -> list[Claim]:
    async with db.transaction() as tx:
        claimed = await claim(tx, now, lease_ms, room, default_room, limit)
        if not claimed:
            return []
        found = await targets(tx, {c.webhook_id for c in claimed})
        bodies = await envelopes(tx, {c.event_id for c in claimed})
    return [Claim(c, found.get(c.webhook_id), bodies.get(c.event_id)) for c in claimed]


_CLAIM_DUE = Forms(postgresql=_claim_due_postgres, sqlite=_claim_due_sqlite)


# The candidates in due order, locked (SKIP LOCKED: another dispatcher's are passed over), at
# most ``free`` per endpoint (its room: $3/$4, else $5), leased, and joined to what posting needs.
_CLAIM_PG = """
    WITH candidates AS (
        SELECT webhook_id, event_id, due_at FROM webhook_deliveries
        WHERE due_at <= $1 AND webhook_id <> ALL($7::varchar[])
        ORDER BY due_at LIMIT $6
        FOR UPDATE SKIP LOCKED
    ), chosen AS (
        SELECT c.webhook_id, c.event_id,
            row_number() OVER (PARTITION BY c.webhook_id ORDER BY c.due_at, c.event_id) AS n,
            COALESCE(r.free, $5) AS free
        FROM candidates AS c
        LEFT JOIN unnest($3::varchar[], $4::integer[]) AS r(webhook_id, free) USING (webhook_id)
    ), leased AS (
        UPDATE webhook_deliveries AS d SET due_at = $2, claims = d.claims + 1
        FROM chosen
        WHERE chosen.n <= chosen.free
            AND d.webhook_id = chosen.webhook_id AND d.event_id = chosen.event_id
        RETURNING d.webhook_id, d.event_id, d.team_id, d.attempts, d.claims, d.replay_status
    )
    SELECT leased.*, e.type, e.email_id, e.created_at AS event_at, e.data::text AS data,
        w.endpoint, w.enabled, w.secret, w.previous_secret, w.previous_secret_until
    FROM leased
    LEFT JOIN events AS e ON e.id = leased.event_id
    LEFT JOIN webhooks AS w ON w.id = leased.webhook_id
"""


def _claims_pg(rows: Sequence[Any]) -> list[Claim]:
    found: dict[str, Target | None] = {}
    claims: list[Claim] = []
    for r in rows:
        webhook_id = r["webhook_id"]
        if webhook_id not in found:
            found[webhook_id] = None if r["endpoint"] is None else _target_pg(r)
        event = None
        if r["type"] is not None:
            data = orjson.loads(r["data"])
            event = Event(
                r["event_id"], r["team_id"], r["type"], r["email_id"], r["event_at"], data
            )
        delivery = Claimed(
            webhook_id,
            r["event_id"],
            r["team_id"],
            r["attempts"],
            r["claims"],
            r["replay_status"],
        )
        claims.append(Claim(delivery, found[webhook_id], event))
    return claims


def _target_pg(r: Any) -> Target:
    return Target(
        r["webhook_id"],
        r["team_id"],
        r["endpoint"],
        bool(r["enabled"]),
        r["secret"],
        r["previous_secret"],
        r["previous_secret_until"],
    )


async def claim(
    tx: Tx, now: int, lease_ms: int, room: dict[str, int], default_room: int, limit: int
) -> list[Claimed]:
    """Claim up to ``limit`` due deliveries, at most ``room[id]`` (else ``default_room``) each.

    Endpoints with no room left are not even read, so a slow endpoint's backlog never stands
    in front of another endpoint's deliveries.
    """
    full = [webhook_id for webhook_id, free in room.items() if free <= 0]
    query = select(webhook_deliveries.c.webhook_id, webhook_deliveries.c.event_id).where(
        webhook_deliveries.c.due_at <= now
    )
    if full:
        query = query.where(webhook_deliveries.c.webhook_id.not_in(full))
    query = query.order_by(webhook_deliveries.c.due_at).limit(limit)
    candidates = (await tx.conn.execute(query.with_for_update(skip_locked=True))).all()
    chosen = _within_room(candidates, room, default_room, limit)
    claimed: list[Claimed] = []
    for webhook_id, event_ids in chosen.items():  # by primary key: one indexed update each
        lease = (
            update(webhook_deliveries)
            .where(
                webhook_deliveries.c.webhook_id == webhook_id,
                among(tx, webhook_deliveries.c.event_id, event_ids),
            )
            .values(due_at=now + lease_ms, claims=webhook_deliveries.c.claims + 1)
            .returning(*_CLAIMED)
        )
        claimed.extend(_claimed(row) for row in await tx.conn.execute(lease))
    return claimed


def _claimed(r: Any) -> Claimed:
    return Claimed(r.webhook_id, r.event_id, r.team_id, r.attempts, r.claims, r.replay_status)


_CLAIMED = (
    webhook_deliveries.c.webhook_id,
    webhook_deliveries.c.event_id,
    webhook_deliveries.c.team_id,
    webhook_deliveries.c.attempts,
    webhook_deliveries.c.claims,
    webhook_deliveries.c.replay_status,
)


def _within_room(
    candidates: Sequence[Any], room: dict[str, int], default_room: int, limit: int
) -> dict[str, list[str]]:
    """The candidates that fit each endpoint's room, grouped by endpoint."""
    left = dict(room)
    chosen: dict[str, list[str]] = {}
    taken = 0
    for webhook_id, event_id in candidates:
        free = left.get(webhook_id, default_room)
        if free > 0 and taken < limit:
            chosen.setdefault(webhook_id, []).append(event_id)
            left[webhook_id] = free - 1
            taken += 1
    return chosen


async def envelopes(tx: Tx, event_ids: Collection[str]) -> dict[str, Event]:
    query = select(events).where(among(tx, events.c.id, event_ids))
    return {
        r.id: Event(r.id, r.team_id, r.type, r.email_id, r.created_at, r.data)
        for r in await tx.conn.execute(query)
    }


async def pause(tx: Tx, items: Sequence[Claimed]) -> None:
    """Release claimed deliveries of a disabled endpoint without an attempt."""
    if not items:
        return
    query = (
        update(webhook_deliveries)
        .where(
            webhook_deliveries.c.webhook_id == bindparam("w"),
            webhook_deliveries.c.event_id == bindparam("e"),
            webhook_deliveries.c.claims == bindparam("c"),
        )
        .values(due_at=None)
    )
    params = [{"w": i.webhook_id, "e": i.event_id, "c": i.claims} for i in items]
    await tx.conn.execute(query, params)


async def record_outcomes(db: Database, outcomes: Sequence[Outcome]) -> None:
    """Store finished attempts and the resulting delivery states (group commit): ONE statement
    on PostgreSQL (on the driver connection, committing by itself), three in one transaction on
    SQLite. Wakes the dispatchers when a delivery falls due again later."""
    if outcomes:
        retry = any(o.next_attempt_at is not None for o in outcomes)
        await db.dialect.pick(_RECORD)(db, outcomes, retry)


async def _record_postgres(db: Database, outcomes: Sequence[Outcome], retry: bool) -> None:
    async with db.driver() as conn:
        await conn.execute(_RECORD_PG, *_record_arrays(outcomes))
        if retry:
            await db.notify_now(conn, CHANNEL)


async def _record_sqlite(db: Database, outcomes: Sequence[Outcome], retry: bool) -> None:
    async with db.transaction() as tx:
        await _record_kept(tx, outcomes)
        if retry:
            tx.notify(CHANNEL)


_RECORD = Forms(postgresql=_record_postgres, sqlite=_record_sqlite)


async def _record_kept(tx: Tx, outcomes: Sequence[Outcome]) -> None:
    """SQLite: the outcomes of endpoints that still exist, as an attempt and a state each."""
    alive = await _existing_webhooks(tx, {o.claimed.webhook_id for o in outcomes})
    kept = [o for o in outcomes if o.claimed.webhook_id in alive]
    if not kept:
        return
    await tx.conn.execute(webhook_attempts.insert(), [_attempt_row(o) for o in kept])
    query = (
        update(webhook_deliveries)
        .where(
            webhook_deliveries.c.webhook_id == bindparam("w"),
            webhook_deliveries.c.event_id == bindparam("e"),
            webhook_deliveries.c.claims == bindparam("c"),
        )
        .values(
            status=bindparam("s"),
            attempts=bindparam("n"),
            due_at=bindparam("d"),
            next_attempt_at=bindparam("d"),
            replay_status=None,
        )
    )
    await tx.conn.execute(query, [_state_params(o) for o in kept])


# PostgreSQL: every attempt inserted and every delivery's state written by ONE statement over
# arrays (one round trip, one plan, one executor start per group instead of two per delivery).
# The join share-locks each endpoint until commit and drops the outcomes of deleted ones.
_RECORD_PG = """
    WITH o AS (
        SELECT t.* FROM unnest(
            $1::varchar[], $2::varchar[], $3::varchar[], $4::varchar[], $5::bigint[],
            $6::integer[], $7::boolean[], $8::text[], $9::integer[], $10::text[],
            $11::integer[], $12::varchar[], $13::integer[], $14::bigint[]
        ) AS t(id, w, e, team, at, code, ok, err, ms, body, c, s, n, d)
        JOIN webhooks ON webhooks.id = t.w
        FOR SHARE OF webhooks
    ),
    attempts AS (
        INSERT INTO webhook_attempts (id, webhook_id, event_id, team_id, attempted_at,
            status_code, success, error, duration_ms, response_body)
        SELECT id, w, e, team, at, code, ok, err, ms, body FROM o
    )
    UPDATE webhook_deliveries AS d
    SET status = o.s, attempts = o.n, due_at = o.d, next_attempt_at = o.d, replay_status = NULL
    FROM o
    WHERE d.webhook_id = o.w AND d.event_id = o.e AND d.claims = o.c
"""


def _record_arrays(outcomes: Sequence[Outcome]) -> tuple[list[Any], ...]:
    """The columns of ``_RECORD_PG``, one array each, in its parameters' order."""
    attempts = [o.attempt for o in outcomes]
    claimed = [o.claimed for o in outcomes]
    return (
        [a.id for a in attempts],
        [a.webhook_id for a in attempts],
        [a.event_id for a in attempts],
        [c.team_id for c in claimed],
        [a.attempted_at for a in attempts],
        [a.status_code for a in attempts],
        [a.success for a in attempts],
        [a.error for a in attempts],
        [a.duration_ms for a in attempts],
        [a.response_body for a in attempts],
        [c.claims for c in claimed],
        [o.status.value for o in outcomes],
        [c.attempts + 1 for c in claimed],
        [o.next_attempt_at for o in outcomes],
    )


async def _existing_webhooks(tx: Tx, webhook_ids: Collection[str]) -> set[str]:
    """Endpoints not deleted meanwhile (SQLite: its single writer keeps them until commit)."""
    query = select(webhooks.c.id).where(webhooks.c.id.in_(list(webhook_ids)))
    return set((await tx.conn.execute(query)).scalars())


def _attempt_row(outcome: Outcome) -> dict[str, Any]:
    a = outcome.attempt
    return {
        "id": a.id,
        "webhook_id": a.webhook_id,
        "event_id": a.event_id,
        "team_id": outcome.claimed.team_id,
        "attempted_at": a.attempted_at,
        "status_code": a.status_code,
        "success": a.success,
        "error": a.error,
        "duration_ms": a.duration_ms,
        "response_body": a.response_body,
    }


def _state_params(outcome: Outcome) -> dict[str, Any]:
    c = outcome.claimed
    return {
        "w": c.webhook_id,
        "e": c.event_id,
        "c": c.claims,
        "s": outcome.status.value,
        "n": c.attempts + 1,
        "d": outcome.next_attempt_at,
    }


@dataclass(frozen=True)
class Due:
    now: bool  # some delivery is due (claimable, or held back: a saturated endpoint's, or locked)
    later: int | None  # when the next delivery after ``now`` falls due


async def next_due(tx: Tx, now: int) -> Due:
    """Whether a delivery is due at ``now``, and when the next one falls due after it.

    Two probes of the due index, whatever the backlog: no endpoint is excluded, since excluding
    one by ``webhook_id`` makes PostgreSQL fetch every due row of it.
    """
    due_at = webhook_deliveries.c.due_at
    first = select(func.min(due_at)).where(due_at.is_not(None)).scalar_subquery()
    later = select(func.min(due_at)).where(due_at > now).scalar_subquery()
    row = (await tx.conn.execute(select(first, later))).one()
    return Due(row[0] is not None and int(row[0]) <= now, None if row[1] is None else int(row[1]))
