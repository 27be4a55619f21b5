"""The job queue in the database.

A job is due when ``available_at <= now``. Claiming pushes ``available_at`` out by the lease
and bumps ``attempts``; finishing deletes the row. While a worker runs a job its heartbeat keeps
extending the lease (``extend_many``); if the worker dies, the job falls due again when its lease
runs out, with no janitor. On PostgreSQL ``FOR UPDATE SKIP LOCKED`` lets any
number of workers claim side by side without ever handing one job to two of them; on SQLite the
claim runs inside ``BEGIN IMMEDIATE``, which serialises claimers. A worker claims by kind,
each kind a lane read in due order from ``ix_jobs_kind_due`` (``claim_lanes``). ``attempts``
counts the claims and only grows: it is the fencing token, so a worker whose lease was taken
over cannot finish or reschedule the new claim. ``holds`` counts the claims that ended with
the job put back unsent (its destination busy), so retry limits count ``attempts - holds``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    any_,
    bindparam,
    cast,
    delete,
    func,
    literal,
    select,
    true,
    tuple_,
    union_all,
    update,
)

from posthaste.core.models import Job, NewJob
from posthaste.storage import bulk
from posthaste.storage.database import JOBS_CHANNEL, Tx
from posthaste.storage.dialects import Forms
from posthaste.storage.tables import jobs

CHANNEL = JOBS_CHANNEL


def job_row(
    kind: str, ref: str, team_id: str | None, available_at: int, now: int
) -> dict[str, Any]:
    return {
        "kind": kind,
        "ref": ref,
        "team_id": team_id,
        "available_at": available_at,
        "attempts": 0,
        "holds": 0,
        "created_at": now,
    }


def enqueued(tx: Tx, items: Sequence[NewJob], now: int) -> bulk.TableRows:
    """Jobs to insert with other rows in one statement (``bulk.insert_tables``); the workers
    are woken when the transaction commits."""
    return enqueued_rows(tx, [job_row(j.kind, j.ref, j.team_id, j.due_at, now) for j in items])


def enqueued_rows(tx: Tx, rows: Sequence[dict[str, Any]]) -> bulk.TableRows:
    """``enqueued`` for jobs given as their rows (``job_row``)."""
    if rows:
        tx.notify(CHANNEL)
    return jobs, rows


async def enqueue_many(tx: Tx, rows: Sequence[dict[str, Any]]) -> None:
    """Store jobs and wake the workers when the transaction commits."""
    if rows:
        await bulk.insert_rows(tx, jobs, rows)
        tx.notify(CHANNEL)


async def enqueue(
    tx: Tx, kind: str, ref: str, team_id: str | None, available_at: int, now: int
) -> None:
    await enqueue_many(tx, [job_row(kind, ref, team_id, available_at, now)])


@dataclass(frozen=True)
class Claimed:
    """The jobs a claim took, and when the earliest job it left falls due (None: no job)."""

    jobs: list[Job]
    next_due: int | None


_RETURNED = (jobs.c.id, jobs.c.kind, jobs.c.ref, jobs.c.team_id, jobs.c.attempts, jobs.c.holds)


def _claiming(kinds: Sequence[str], worker: str, now: int, lease_ms: int, limit: int) -> Any:
    due = (
        select(jobs.c.id)
        .where(jobs.c.available_at <= now, jobs.c.kind.in_(kinds))
        .order_by(jobs.c.available_at, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return (
        update(jobs)
        .where(jobs.c.id.in_(due))
        .values(available_at=now + lease_ms, attempts=jobs.c.attempts + 1, locked_by=worker)
    )


def _later(kinds: Sequence[str], now: Any) -> Any:
    """The earliest ``available_at`` after ``now``: a scheduled job, a retry or a lease. The
    kinds are a parameter each (``IN (?, ?, ...)`` as written): a list as such is expanded
    into parameters again at every run of a kept statement, a quarter of a claim's CPU."""
    return select(func.min(jobs.c.available_at).label("next_due")).where(
        jobs.c.kind.in_([literal(kind) for kind in kinds]), jobs.c.available_at > now
    )


def _jobs(rows: Sequence[Any]) -> list[Job]:
    found = (Job(r.id, r.kind, r.ref, r.team_id, r.attempts, r.holds) for r in rows)
    return sorted(found, key=lambda j: j.id)


# A claim's moment, worker and lease are parameters: its statement is built once per set of
# lanes (below) and only these change from one claim to the next.
_NOW = bindparam("claim_now", type_=BigInteger)
_UNTIL = bindparam("claim_until", type_=BigInteger)
_WORKER = bindparam("claim_worker", type_=jobs.c.locked_by.type)


def _lane(kind: str, limit: int) -> Any:
    """One kind's due jobs in due order, the first ``limit``: a range of ``ix_jobs_kind_due``
    read in order (migration 0023), however many jobs of other kinds are due before them."""
    return (
        select(jobs.c.id)
        .where(jobs.c.kind == kind, jobs.c.available_at <= _NOW)
        .order_by(jobs.c.available_at, jobs.c.id)
        .limit(limit)
    )


_IDS = ARRAY(BigInteger)  # an array, not ``ANY (subquery)``: one value, computed once


def _taking(ids: Any) -> Any:
    return (
        update(jobs)
        .where(ids)
        .values(available_at=_UNTIL, attempts=jobs.c.attempts + 1, locked_by=_WORKER)
        .returning(*_RETURNED)
    )


def _either(selects: list[Any]) -> Any:
    return selects[0] if len(selects) == 1 else union_all(*selects)


# A worker's claim statements are built once per set of lanes and kept: building the
# nine-lane statement and its cache key cost several times more CPU than running it (6.2 against
# 1.6 ms a claim on a 2-core box), and a worker has two sets (with and without its wide lanes).
Lanes = tuple[tuple[str, int], ...]


@functools.lru_cache(maxsize=64)
def _claim_lanes_pg_statement(lanes: Lanes) -> Any:
    # One statement: each lane's jobs locked in its own CTE (FOR UPDATE is not allowed in a
    # UNION's branches), the claim, and beside it the next due time, which the statement reads
    # as it was before the claim (the claimed jobs were due, so they are not "after now").
    due = [
        _lane(kind, limit).with_for_update(skip_locked=True).cte(f"lane_{i}")
        for i, (kind, limit) in enumerate(lanes)
    ]
    # The lanes' ids as one array, looked up by primary key: as ``id IN (lanes)`` the planner,
    # which cannot tell how few they are, may hash-join them against the whole table.
    union = _either([select(lane.c.id) for lane in due]).subquery("due")
    ids = jobs.c.id == any_(cast(select(func.array_agg(union.c.id)).scalar_subquery(), _IDS))
    claimed = _taking(ids).cte("claimed")
    later = _later([kind for kind, _ in lanes], _NOW).subquery("later")
    return select(later.c.next_due, *claimed.c).select_from(later.outerjoin(claimed, true()))


@functools.lru_cache(maxsize=64)
def _claim_lanes_sqlite_statements(lanes: Lanes) -> tuple[Any, Any]:
    # SQLite has no UPDATE in a WITH: two statements, the next due time read first (the
    # write lock is held from BEGIN IMMEDIATE, so nothing changes between them). A compound
    # SELECT's branches take no LIMIT of their own: each lane is a subquery.
    lanes_ = [_lane(kind, limit).subquery() for kind, limit in lanes]
    ids = jobs.c.id.in_(_either([select(lane.c.id) for lane in lanes_]))
    return _later([kind for kind, _ in lanes], _NOW), _taking(ids)


def _claim_params(worker: str, now: int, lease_ms: int) -> dict[str, Any]:
    return {"claim_now": now, "claim_until": now + lease_ms, "claim_worker": worker}


async def _claim_lanes_pg(
    tx: Tx, lanes: Mapping[str, int], worker: str, now: int, lease_ms: int
) -> Claimed:
    query = _claim_lanes_pg_statement(tuple(lanes.items()))
    rows = await tx.rows(query, _claim_params(worker, now, lease_ms))
    due_at = rows[0][0]
    found = sorted((Job(*r[1:]) for r in rows if r[1] is not None), key=lambda j: j.id)
    return Claimed(found, None if due_at is None else int(due_at))


async def _claim_lanes_sqlite(
    tx: Tx, lanes: Mapping[str, int], worker: str, now: int, lease_ms: int
) -> Claimed:
    later, taking = _claim_lanes_sqlite_statements(tuple(lanes.items()))
    params = _claim_params(worker, now, lease_ms)
    due_at = (await tx.conn.execute(later, params)).scalar()
    rows = (await tx.conn.execute(taking, params)).all()
    return Claimed(_jobs(rows), None if due_at is None else int(due_at))


_CLAIM_LANES = Forms(postgresql=_claim_lanes_pg, sqlite=_claim_lanes_sqlite)


async def claim_lanes(
    tx: Tx, lanes: Mapping[str, int], worker: str, now: int, lease_ms: int
) -> Claimed:
    """Claim, for each kind in ``lanes``, up to its number of its due jobs in due order, for
    ``lease_ms``; and tell when the earliest of the others (scheduled, to retry, or leased)
    falls due: the worker's next wake-up, read in the claim's own round trip.

    Each kind is a lane of its own: a flood of one kind's due jobs (10,000 automation steps, a
    broadcast's deliveries) neither fills another kind's claim nor is scanned past to find it,
    and a kind may be claimed many at once (``workers/kinds.py``) without the others."""
    if not lanes:
        return Claimed([], None)
    claim_in = tx.dialect.pick(_CLAIM_LANES)
    return await claim_in(tx, lanes, worker, now, lease_ms)


async def claim(
    tx: Tx, kinds: Sequence[str], worker: str, now: int, lease_ms: int, limit: int
) -> list[Job]:
    """Claim up to ``limit`` due jobs of ``kinds`` for ``lease_ms``."""
    query = _claiming(kinds, worker, now, lease_ms, limit).returning(*_RETURNED)
    return _jobs((await tx.conn.execute(query)).all())


async def claim_refs(
    tx: Tx, kind: str, refs: Sequence[str], worker: str, now: int, lease_ms: int
) -> list[Job]:
    """Claim the due jobs of ``kind`` for these ``refs`` (by the ``(ref, kind)`` index, not in
    due order), skipping those another claim holds: the jobs a worker's own batch just made
    due, taken at once (``workers/runner.Handoff``)."""
    if not refs:
        return []
    due = (
        select(jobs.c.id)
        .where(jobs.c.ref.in_(refs), jobs.c.kind == kind, jobs.c.available_at <= now)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    query = (
        update(jobs)
        .where(jobs.c.id.in_(due))
        .values(available_at=now + lease_ms, attempts=jobs.c.attempts + 1, locked_by=worker)
        .returning(*_RETURNED)
    )
    return _jobs((await tx.conn.execute(query)).all())


async def finish(tx: Tx, job: Job) -> bool:
    """Delete a job we still hold; False when our lease was lost to another worker."""
    query = delete(jobs).where(jobs.c.id == job.id, jobs.c.attempts == job.attempts)
    return bool((await tx.conn.execute(query)).rowcount)


async def retry_at(tx: Tx, job: Job, available_at: int) -> bool:
    """Release a job we hold, due again at ``available_at``."""
    query = (
        update(jobs)
        .where(jobs.c.id == job.id, jobs.c.attempts == job.attempts)
        .values(available_at=available_at, locked_by=None)
    )
    updated = bool((await tx.conn.execute(query)).rowcount)
    tx.notify(CHANNEL)
    return updated


async def note(tx: Tx, job: Job, ref: str, available_at: int | None = None) -> bool:
    """A recurring job we hold writes its progress into its ``ref``; with ``available_at`` it is
    released too, due again then. False when our lease was lost to another worker."""
    values: dict[str, Any] = {"ref": ref}
    if available_at is not None:
        values.update(available_at=available_at, locked_by=None)
    query = update(jobs).where(jobs.c.id == job.id, jobs.c.attempts == job.attempts).values(values)
    return bool((await tx.conn.execute(query)).rowcount)


async def ensure(tx: Tx, kind: str, ref: str, prefix: str, now: int) -> bool:
    """Enqueue a recurring job unless one of ``kind`` whose ref starts with ``prefix`` exists.
    Two processes starting at once may both add one; the job removes its twins when it runs
    (``settle_twins``)."""
    existing = select(jobs.c.id).where(jobs.c.kind == kind, jobs.c.ref.startswith(prefix))
    if (await tx.conn.execute(existing.limit(1))).first() is not None:
        return False
    await enqueue(tx, kind, ref, None, now, now)
    return True


async def request(tx: Tx, kind: str, ref: str, available_at: int, now: int) -> int:
    """Enqueue a job of ``(kind, ref)`` unless one is pending, and answer when the pending one
    (or this new one) was asked for. Two workers asking at once may both add one; the handler
    removes the twins (``settle_twins(..., exact=True)``)."""
    pending = select(func.min(jobs.c.created_at)).where(jobs.c.kind == kind, jobs.c.ref == ref)
    asked = (await tx.conn.execute(pending)).scalar()
    if asked is not None:
        return int(asked)
    await enqueue(tx, kind, ref, None, available_at, now)
    return now


async def settle_twins(tx: Tx, job: Job, prefix: str, *, exact: bool = False) -> bool:
    """Of the jobs of ``job``'s kind whose ref starts with ``prefix`` (is ``prefix``, when
    ``exact``), the oldest (lowest id) is the one: delete the younger ones; False when ``job``
    is not the oldest."""
    same = jobs.c.ref == prefix if exact else jobs.c.ref.startswith(prefix)
    twins = (jobs.c.kind == job.kind, same)
    elder = select(jobs.c.id).where(*twins, jobs.c.id < job.id).limit(1)
    if (await tx.conn.execute(elder)).first() is not None:
        return False
    await tx.conn.execute(delete(jobs).where(*twins, jobs.c.id > job.id))
    return True


async def move(tx: Tx, kind: str, ref: str, available_at: int) -> int:
    """Make the pending jobs of ``(kind, ref)`` due at another time (rescheduling)."""
    query = (
        update(jobs).where(jobs.c.kind == kind, jobs.c.ref == ref).values(available_at=available_at)
    )
    count = (await tx.conn.execute(query)).rowcount
    tx.notify(CHANNEL)
    return int(count)


async def drop(tx: Tx, kind: str, ref: str) -> int:
    query = delete(jobs).where(jobs.c.kind == kind, jobs.c.ref == ref)
    return int((await tx.conn.execute(query)).rowcount)


async def next_due_at(tx: Tx, kinds: Sequence[str]) -> int | None:
    """When the earliest job (due or leased) becomes claimable: the worker's next wake-up."""
    query = select(func.min(jobs.c.available_at)).where(jobs.c.kind.in_(kinds))
    due = (await tx.conn.execute(query)).scalar()
    return None if due is None else int(due)


async def depth(tx: Tx) -> int:
    return int((await tx.conn.execute(select(func.count()).select_from(jobs))).scalar() or 0)


async def still_held(tx: Tx, held: Sequence[Job]) -> list[Job]:
    """Of the jobs a worker claimed, those it still holds (no other claim since), their rows
    locked until the transaction ends: neither claimed nor released by anyone else meanwhile,
    so the caller's ``finish_many`` and ``retry_many`` of them cannot miss."""
    if not held:
        return []
    query = (
        select(jobs.c.id)
        .where(tuple_(jobs.c.id, jobs.c.attempts).in_([(j.id, j.attempts) for j in held]))
        .order_by(jobs.c.id)
        .with_for_update()
    )
    kept = set((await tx.conn.execute(query)).scalars())
    return [job for job in held if job.id in kept]


async def finish_many(tx: Tx, held: Sequence[Job]) -> None:
    """``finish`` for many jobs in one statement (each still fenced by its ``attempts``)."""
    await bulk.delete_rows(tx, jobs, [{"id": j.id, "attempts": j.attempts} for j in held])


async def retry_many(tx: Tx, held: Sequence[tuple[Job, int]]) -> None:
    """``retry_at`` for many (job, available_at) pairs in one statement."""
    if not held:
        return
    rows = [
        {"id": j.id, "attempts": j.attempts, "available_at": at, "locked_by": None}
        for j, at in held
    ]
    await bulk.update_rows(tx, jobs, ["id", "attempts"], rows)
    tx.notify(CHANNEL)


async def postpone_many(
    tx: Tx, held: Sequence[tuple[Job, int]], reasons: Sequence[str] | None = None
) -> None:
    """Release jobs we hold unsent, due again at their time, each with one more hold and why
    (``reasons``, one per job): mail held for a busy destination may wait many times without
    looking like a job that keeps crashing (``Job.tries``). Fenced by ``attempts`` like
    ``retry_many``; ``attempts`` is kept."""
    if not held:
        return
    query = (
        update(jobs)
        .where(jobs.c.id == bindparam("b_id"), jobs.c.attempts == bindparam("b_attempts"))
        .values(
            available_at=bindparam("b_at"),
            locked_by=None,
            holds=jobs.c.holds + 1,
            hold_reason=bindparam("b_reason"),
        )
    )
    why = list(reasons) if reasons is not None else [None] * len(held)
    rows = [
        {"b_id": j.id, "b_attempts": j.attempts, "b_at": at, "b_reason": reason}
        for (j, at), reason in zip(held, why, strict=True)
    ]
    await tx.conn.execute(query, rows)
    tx.notify(CHANNEL)


async def hold_reasons(tx: Tx, held: Sequence[Job]) -> dict[int, str]:
    """Why each of these jobs was last held (those ever held and with a reason kept)."""
    if not held:
        return {}
    query = select(jobs.c.id, jobs.c.hold_reason).where(
        jobs.c.id.in_([j.id for j in held]), jobs.c.hold_reason.is_not(None)
    )
    return {row.id: row.hold_reason for row in (await tx.conn.execute(query)).all()}


async def extend_many(tx: Tx, held: Sequence[Job], worker: str, until: int) -> int:
    """Push the leases of jobs ``worker`` still holds out to ``until`` (its heartbeat).

    One statement, fenced by ``attempts`` like ``finish_many``, and by ``locked_by``: a job
    released meanwhile (``retry_at`` clears it) keeps its new time. A row another transaction
    has locked (finishing or releasing it) is skipped, never waited for: no deadlock with it.
    Returns how many leases were extended."""
    if not held:
        return 0
    mine = (
        select(jobs.c.id)
        .where(
            tuple_(jobs.c.id, jobs.c.attempts).in_([(j.id, j.attempts) for j in held]),
            jobs.c.locked_by == worker,
        )
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    query = update(jobs).where(jobs.c.id.in_(mine)).values(available_at=until)
    return int((await tx.conn.execute(query)).rowcount)
