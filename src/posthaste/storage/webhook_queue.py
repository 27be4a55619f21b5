"""The webhook delivery queue as the dispatcher works it: claim due deliveries, release a
disabled endpoint's, record what each attempt left, and find when the next one falls due.

A delivery row is due when ``due_at <= now``; the dispatcher claims it by pushing ``due_at`` out
by a lease and bumping ``claims`` (the fencing token), exactly like the job queue, so a crashed
dispatcher's deliveries fall due again by themselves. The claim and the recording of outcomes
each have a PostgreSQL form (one statement on a driver connection, committing by itself) and a
SQLite form (a few statements in one transaction), side by side under one name.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import bindparam, func, select, update

from posthaste.core.models import Event
from posthaste.core.webhooks import DeliveryStatus, WebhookAttempt
from posthaste.storage.database import WEBHOOKS_CHANNEL, Database, Tx
from posthaste.storage.dialects import Forms, among
from posthaste.storage.tables import events, webhook_attempts, webhook_deliveries, webhooks
from posthaste.storage.webhook_endpoints import Target, targets

CHANNEL = WEBHOOKS_CHANNEL


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


@dataclass(frozen=True)
class Due:
    now: bool  # some delivery is due (claimable, or held back: a saturated endpoint's, or locked)
    later: int | None  # when the next delivery after ``now`` falls due


# --- claiming -------------------------------------------------------------------------------


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


# --- settling -------------------------------------------------------------------------------


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
        db.wake(CHANNEL)


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


# --- what falls due next --------------------------------------------------------------------


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
