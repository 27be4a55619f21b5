"""Teams: their names and limits (their API keys are in ``storage/api_keys.py``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from posthaste.core.models import Team
from posthaste.errors import Conflict
from posthaste.storage.database import Tx
from posthaste.storage.tables import teams


def _team(row: Any) -> Team:
    return Team(row.id, row.name, row.rate_limit, row.daily_quota, row.created_at)


async def insert_team(tx: Tx, team: Team) -> None:
    """Insert a team; a taken name is ``Conflict`` even when two processes race for it."""
    try:
        async with tx.conn.begin_nested():
            await _insert_team_row(tx, team)
    except IntegrityError as exc:
        raise Conflict(f"A team named {team.name!r} already exists.") from exc


async def _insert_team_row(tx: Tx, team: Team) -> None:
    await tx.conn.execute(
        teams.insert().values(
            id=team.id,
            name=team.name,
            rate_limit=team.rate_limit,
            daily_quota=team.daily_quota,
            created_at=team.created_at,
        )
    )


async def get_team_by_name(tx: Tx, name: str) -> Team | None:
    row = (await tx.conn.execute(select(teams).where(teams.c.name == name))).first()
    return _team(row) if row else None


async def count_teams(tx: Tx) -> int:
    return len((await tx.conn.execute(select(teams.c.id).limit(1))).all())


async def list_teams(tx: Tx) -> list[Team]:
    rows = await tx.conn.execute(select(teams).order_by(teams.c.created_at))
    return [_team(r) for r in rows]


async def update_team_limits(
    tx: Tx, team_id: str, *, rate_limit: int | None, daily_quota: int | None
) -> None:
    values: dict[str, int] = {}
    if rate_limit is not None:
        values["rate_limit"] = rate_limit
    if daily_quota is not None:
        values["daily_quota"] = daily_quota
    if values:
        await tx.conn.execute(update(teams).where(teams.c.id == team_id).values(**values))


async def get_team(tx: Tx, team_id: str) -> Team | None:
    row = (await tx.conn.execute(select(teams).where(teams.c.id == team_id))).first()
    return _team(row) if row else None
