"""The destinations' throttle rows: one per receiving destination, shared by the fleet.

The hot statement is ``claim_slots``: one ``UPDATE … RETURNING`` that moves the destination's
next free slot forward by a block of slots and hands back where the block starts, only when the
destination is not suspended and its queue of promised slots does not reach beyond the horizon.
The same text on PostgreSQL and SQLite (``CASE`` for the larger of two values, integers only),
and one row lock held for the statement alone. The rarer changes (a suspension, a step up of the
rate, a new destination) are a statement or two each. Held mail takes its turns from
``queue_holds``: one statement per destination and batch of held mail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import BigInteger, BindParameter, bindparam, case, delete, select, update

from posthaste.core.ids import new_id
from posthaste.storage.database import Tx
from posthaste.storage.tables import destination_replies, destinations

KEEP_REPLIES = 20  # per destination, the newest
WINDOW_US = 1_000_000  # the slots taken are counted over windows of at least this long


@dataclass(frozen=True)
class Pace:
    """A destination's throttle as stored."""

    name: str
    mx_hosts: list[str]
    interval_us: int
    next_slot_us: int
    suspended_until: int
    strikes: int
    changed_at: int
    ceiling_us: int
    used_interval_us: int = 0  # the pace the fleet took over the last window (0: unknown)
    window_us: int = 0
    window_slots: int = 0

    def taken_interval_us(self, now_us: int) -> int:
        """The pace actually taken lately: the last window's, or the current one's once it is
        a quarter second long (and began after the last suspension: none is sent while
        suspended), whichever was faster; 0 when unknown."""
        paces = [self.used_interval_us] if self.used_interval_us > 0 else []
        current = now_us - self.window_us
        after = self.window_us >= self.suspended_until * 1000
        if self.window_slots > 0 and current >= WINDOW_US // 4 and after:
            paces.append(current // self.window_slots)
        return min(paces, default=0)


@dataclass(frozen=True)
class Block:
    """Slots claimed at once: ``count`` messages, ``step_us`` apart, from ``start_us``."""

    start_us: int
    step_us: int
    count: int
    interval_us: int
    strikes: int
    changed_at: int
    ceiling_us: int
    used_interval_us: int


@dataclass(frozen=True)
class Reply:
    destination: str
    at: int
    reply: str
    decision: str


_c = destinations.c


def _int(name: str) -> BindParameter[int]:
    return bindparam(name, type_=BigInteger)


_STEP = case((_c.interval_us > _int("fastest_us"), _c.interval_us), else_=_int("fastest_us"))
# A window of a second or more has passed: it ends with this claim, and the next starts.
_ROLL = _c.window_us <= _int("now_us") - WINDOW_US
_MEASURE = {
    "window_us": case((_ROLL, _int("now_us")), else_=_c.window_us),
    "window_slots": case((_ROLL, _int("sent")), else_=_c.window_slots + _int("sent")),
    # The mean interval over the window just ended; unknown after an idle spell or across
    # a suspension (its idle time is no pace taken: measured with it, a "slow down" just
    # after a suspension would be taken for one at a fraction of the pace that drew it).
    "used_interval_us": case(
        (
            _ROLL
            & (_c.window_us > _int("now_us") - 2 * WINDOW_US)
            & (_c.window_us >= _c.suspended_until * 1000)
            & (_c.window_slots > 0),
            (_int("now_us") - _c.window_us) // _c.window_slots,
        ),
        (_ROLL, 0),
        else_=_c.used_interval_us,
    ),
}
_CLAIM = (
    update(destinations)
    .where(
        _c.name == bindparam("dest"),
        _c.suspended_until <= _int("now_ms"),
        _c.next_slot_us <= _int("latest_us"),
    )
    .values(
        next_slot_us=case(
            (_c.next_slot_us > _int("now_us"), _c.next_slot_us),
            else_=_int("now_us"),
        )
        + _int("count") * _STEP,
        updated_at=_int("now_ms"),
        **_MEASURE,
    )
    .returning(
        _c.next_slot_us,
        _c.interval_us,
        _c.strikes,
        _c.changed_at,
        _c.ceiling_us,
        _c.used_interval_us,
    )
)


async def claim_slots(
    tx: Tx,
    name: str,
    count: int,
    fastest_us: int,
    now_us: int,
    horizon_us: int,
    *,
    sent: int = 0,
) -> Block | None:
    """``count`` slots at the destination's pace (never faster than ``fastest_us`` apart), the
    first at most ``horizon_us`` away; None when suspended, too far behind, or unknown.
    ``sent``: the messages this process sent since its last claim, added to the window's
    count (what the fleet actually takes, beside what it is allowed)."""
    params = {
        "dest": name,
        "count": count,
        "sent": sent,
        "fastest_us": fastest_us,
        "now_us": now_us,
        "now_ms": now_us // 1000,
        "latest_us": now_us + horizon_us,
    }
    row = (await tx.conn.execute(_CLAIM, params)).first()
    if row is None:
        return None
    step = max(row.interval_us, fastest_us)
    start = row.next_slot_us - count * step
    return Block(
        start,
        step,
        count,
        row.interval_us,
        row.strikes,
        row.changed_at,
        row.ceiling_us,
        row.used_interval_us,
    )


_QUEUE = (
    update(destinations)
    .where(_c.name == bindparam("dest"))
    .values(
        held_until_us=case(
            (_c.held_until_us > _int("earliest_us"), _c.held_until_us),
            else_=_int("earliest_us"),
        )
        + _int("count") * _int("step_us")
    )
    .returning(_c.held_until_us)
)


async def queue_holds(tx: Tx, name: str, count: int, step_us: int, earliest_us: int) -> int | None:
    """Turns for ``count`` held mails, ``step_us`` apart, after those given before and not
    before ``earliest_us``: the first turn (epoch µs), the others a step after each other;
    None when the destination has no row."""
    params = {"dest": name, "count": count, "step_us": step_us, "earliest_us": earliest_us}
    row = (await tx.conn.execute(_QUEUE, params)).first()
    if row is None:
        return None
    return int(row.held_until_us) - (count - 1) * step_us


async def ensure(tx: Tx, name: str, mx_hosts: Sequence[str], interval_us: int, now: int) -> None:
    """Create the destination's row at the policy's pace unless it exists; keep its MX hosts."""
    row = {
        "name": name,
        "mx_hosts": list(mx_hosts),
        "interval_us": interval_us,
        "next_slot_us": now * 1000,
        "suspended_until": 0,
        "strikes": 0,
        "ceiling_us": 0,
        "changed_at": now,
        "updated_at": now,
    }
    insert = tx.dialect.insert(destinations).values(row)
    await tx.conn.execute(insert.on_conflict_do_nothing(index_elements=["name"]))
    await tx.conn.execute(
        update(destinations).where(_c.name == name).values(mx_hosts=list(mx_hosts))
    )


async def get(tx: Tx, name: str, *, for_update: bool = False) -> Pace | None:
    query = select(destinations).where(_c.name == name)
    if for_update:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    return _pace(row) if row is not None else None


@dataclass(frozen=True)
class Suspension:
    """A "slow down" decided: the new pace, until when, the strike count, the pace too fast."""

    interval_us: int
    until: int
    strikes: int
    ceiling_us: int


async def suspend(
    tx: Tx, name: str, suspension: Suspension, now: int, reply: str, decision: str
) -> None:
    """Slow the destination down and hold its mail until the suspension ends."""
    await tx.conn.execute(
        update(destinations)
        .where(_c.name == name)
        .values(
            interval_us=suspension.interval_us,
            suspended_until=suspension.until,
            next_slot_us=suspension.until * 1000,
            strikes=suspension.strikes,
            ceiling_us=suspension.ceiling_us,
            changed_at=now,
            updated_at=now,
        )
    )
    await add_reply(tx, Reply(name, now, reply, decision))


async def speed_up(
    tx: Tx, name: str, expected_us: int, interval_us: int, now: int, every_ms: int
) -> bool:
    """One step up of the rate (and one strike forgiven), unless another worker has just made
    one or the destination is suspended; True when this one was made."""
    result = await tx.conn.execute(
        update(destinations)
        .where(
            _c.name == name,
            _c.interval_us == expected_us,
            _c.suspended_until <= now,
            _c.changed_at <= now - every_ms,
        )
        .values(
            interval_us=interval_us,
            strikes=case((_c.strikes > 0, _c.strikes - 1), else_=0),
            changed_at=now,
            updated_at=now,
        )
    )
    return bool(result.rowcount)


async def add_reply(tx: Tx, reply: Reply) -> None:
    """Keep ``reply`` and only the newest ``KEEP_REPLIES`` of its destination."""
    r = destination_replies.c
    await tx.conn.execute(
        destination_replies.insert().values(
            id=new_id(),
            destination=reply.destination,
            at=reply.at,
            reply=reply.reply,
            decision=reply.decision,
        )
    )
    newest = (
        select(r.id)
        .where(r.destination == reply.destination)
        .order_by(r.at.desc(), r.id.desc())
        .limit(KEEP_REPLIES)
    )
    await tx.conn.execute(
        delete(destination_replies).where(
            r.destination == reply.destination, r.id.not_in(newest.scalar_subquery())
        )
    )


async def list_all(tx: Tx) -> list[Pace]:
    rows = (await tx.conn.execute(select(destinations).order_by(_c.name))).all()
    return [_pace(row) for row in rows]


async def recent_replies(tx: Tx, limit: int) -> dict[str, list[Reply]]:
    """Each destination's newest replies, newest first."""
    r = destination_replies.c
    rows = (
        await tx.conn.execute(
            select(destination_replies).order_by(r.destination, r.at.desc(), r.id.desc())
        )
    ).all()
    found: dict[str, list[Reply]] = {}
    for row in rows:
        items = found.setdefault(row.destination, [])
        if len(items) < limit:
            items.append(Reply(row.destination, row.at, row.reply, row.decision))
    return found


def _pace(row: object) -> Pace:
    return Pace(
        name=row.name,  # type: ignore[attr-defined]
        mx_hosts=list(row.mx_hosts),  # type: ignore[attr-defined]
        interval_us=row.interval_us,  # type: ignore[attr-defined]
        next_slot_us=row.next_slot_us,  # type: ignore[attr-defined]
        suspended_until=row.suspended_until,  # type: ignore[attr-defined]
        strikes=row.strikes,  # type: ignore[attr-defined]
        changed_at=row.changed_at,  # type: ignore[attr-defined]
        ceiling_us=row.ceiling_us,  # type: ignore[attr-defined]
        used_interval_us=row.used_interval_us,  # type: ignore[attr-defined]
        window_us=row.window_us,  # type: ignore[attr-defined]
        window_slots=row.window_slots,  # type: ignore[attr-defined]
    )
