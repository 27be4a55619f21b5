"""Shared rate limits (GCRA) and daily quotas, kept in the database so every process agrees."""

from __future__ import annotations

from sqlalchemy import case, select, update

from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.tables import daily_usage, rate_limits


async def take_rate_token(
    tx: Tx, team_id: str, now_us: int, interval_us: int, burst_us: int, count: int = 1
) -> int:
    """Consume ``count`` requests from the team's bucket, all or none.

    Returns 0 when allowed, else the microseconds to wait. GCRA keeps one number per team: the
    theoretical arrival time (TAT); ``count`` requests are allowed when TAT + count intervals -
    burst <= now, and move TAT that far on. One statement (an upsert whose update only happens
    when allowed), so an allowed check costs one round trip and commits by itself: the refused
    path alone reads the TAT again to say how long to wait.
    """
    step = count * interval_us
    current = case((rate_limits.c.tat > now_us, rate_limits.c.tat), else_=now_us)
    upsert = insert_for(tx, rate_limits).values(team_id=team_id, tat=now_us + step)
    take = upsert.on_conflict_do_update(
        index_elements=[rate_limits.c.team_id],
        set_={"tat": current + step},
        where=current + step - burst_us <= now_us,
    ).returning(rate_limits.c.tat)
    if (await tx.conn.execute(take)).first() is not None:
        return 0
    query = select(rate_limits.c.tat).where(rate_limits.c.team_id == team_id)
    tat = max(int((await tx.conn.execute(query)).scalar_one()), now_us)
    return max(1, tat + step - burst_us - now_us)


async def add_daily_usage(tx: Tx, team_id: str, day: int, count: int, quota: int) -> int | None:
    """Count ``count`` accepted emails against today's quota.

    Returns the new total, or None (and counts nothing) when it would exceed ``quota``.
    """
    await tx.conn.execute(
        insert_for(tx, daily_usage)
        .values(team_id=team_id, day=day, count=0)
        .on_conflict_do_nothing()
    )
    result = await tx.conn.execute(
        update(daily_usage)
        .where(
            daily_usage.c.team_id == team_id,
            daily_usage.c.day == day,
            daily_usage.c.count + count <= quota,
        )
        .values(count=daily_usage.c.count + count)
        .returning(daily_usage.c.count)
    )
    row = result.first()
    return int(row.count) if row else None


async def daily_usage_of(tx: Tx, team_id: str, day: int) -> int:
    query = select(daily_usage.c.count).where(
        daily_usage.c.team_id == team_id, daily_usage.c.day == day
    )
    return int((await tx.conn.execute(query)).scalar() or 0)
