"""Shared rate limits (GCRA) and daily quotas, kept in the database so every process agrees."""

from __future__ import annotations

from sqlalchemy import select, update

from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.tables import daily_usage, rate_limits


async def take_rate_token(
    tx: Tx, team_id: str, now_us: int, interval_us: int, burst_us: int
) -> int:
    """Consume one request from the team's bucket.

    Returns 0 when allowed, else the microseconds to wait. GCRA keeps one number per team: the
    theoretical arrival time (TAT); a request is allowed when TAT - burst <= now.
    """
    await tx.conn.execute(
        insert_for(tx, rate_limits).values(team_id=team_id, tat=now_us).on_conflict_do_nothing()
    )
    tat: int = (
        await tx.conn.execute(
            select(rate_limits.c.tat).where(rate_limits.c.team_id == team_id).with_for_update()
        )
    ).scalar_one()
    tat = max(tat, now_us)
    wait = tat + interval_us - burst_us - now_us
    if wait > 0:
        return wait
    await tx.conn.execute(
        update(rate_limits).where(rate_limits.c.team_id == team_id).values(tat=tat + interval_us)
    )
    return 0


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
