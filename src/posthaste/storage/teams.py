"""Teams and API keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from posthaste.core.models import ApiKey, KeyMode, Permission, Team
from posthaste.errors import Conflict
from posthaste.storage.database import Tx
from posthaste.storage.tables import api_keys, teams


def _team(row: Any) -> Team:
    return Team(row.id, row.name, row.rate_limit, row.daily_quota, row.created_at)


def _key(row: Any) -> ApiKey:
    return ApiKey(
        id=row.id,
        team_id=row.team_id,
        name=row.name,
        token_hint=row.token_hint,
        mode=KeyMode(row.mode),
        permission=Permission(row.permission),
        domain_id=row.domain_id,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


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


async def insert_key(tx: Tx, key: ApiKey, token_hash: str) -> None:
    await tx.conn.execute(
        api_keys.insert().values(
            id=key.id,
            team_id=key.team_id,
            name=key.name,
            token_hash=token_hash,
            token_hint=key.token_hint,
            mode=key.mode.value,
            permission=key.permission.value,
            domain_id=key.domain_id,
            created_at=key.created_at,
        )
    )


async def find_active_key(tx: Tx, token_hash: str) -> tuple[ApiKey, Team] | None:
    """The live (not revoked) key with this hash, and its team."""
    query = (
        select(
            api_keys,
            teams.c.name.label("team_name"),
            teams.c.rate_limit,
            teams.c.daily_quota,
            teams.c.created_at.label("team_created_at"),
        )
        .join(teams, teams.c.id == api_keys.c.team_id)
        .where(api_keys.c.token_hash == token_hash, api_keys.c.revoked_at.is_(None))
    )
    row = (await tx.conn.execute(query)).first()
    if row is None:
        return None
    team = Team(row.team_id, row.team_name, row.rate_limit, row.daily_quota, row.team_created_at)
    return _key(row), team


async def list_keys(tx: Tx, team_id: str) -> Sequence[ApiKey]:
    query = (
        select(api_keys)
        .where(api_keys.c.team_id == team_id, api_keys.c.revoked_at.is_(None))
        .order_by(api_keys.c.created_at, api_keys.c.id)
    )
    return [_key(r) for r in await tx.conn.execute(query)]


async def revoke_key(tx: Tx, key_id: str, now: int, team_id: str | None = None) -> bool:
    """Revoke a key; scoped to ``team_id`` unless called by the operator's CLI."""
    query = update(api_keys).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
    if team_id is not None:
        query = query.where(api_keys.c.team_id == team_id)
    result = await tx.conn.execute(query.values(revoked_at=now))
    return bool(result.rowcount)
