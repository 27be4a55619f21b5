"""API keys: stored as a SHA-256 hash and a hint, looked up by hash with their team."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update

from posthaste.core.models import ApiKey, KeyMode, Permission, Team
from posthaste.storage.database import Tx
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import api_keys, teams


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


async def page_keys(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[ApiKey], bool] | None:
    """A page of the team's working keys (oldest first) after the key ``anchor`` (before it when
    ``backwards``), and whether more lie beyond; None when the team has no such key."""
    return await read_page(
        tx,
        api_keys,
        select(api_keys).where(api_keys.c.revoked_at.is_(None)),
        _key,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=False,
        backwards=backwards,
    )


async def rename_key(tx: Tx, team_id: str, key_id: str, name: str) -> ApiKey | None:
    """Give the team's working key a new name; None when the team has no such key."""
    query = (
        update(api_keys)
        .where(
            api_keys.c.team_id == team_id,
            api_keys.c.id == key_id,
            api_keys.c.revoked_at.is_(None),
        )
        .values(name=name)
    )
    if not (await tx.conn.execute(query)).rowcount:
        return None
    row = (await tx.conn.execute(select(api_keys).where(api_keys.c.id == key_id))).first()
    return _key(row)


async def revoke_key(tx: Tx, key_id: str, now: int, team_id: str | None = None) -> bool:
    """Revoke a key; scoped to ``team_id`` unless called by the operator's CLI."""
    query = update(api_keys).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
    if team_id is not None:
        query = query.where(api_keys.c.team_id == team_id)
    result = await tx.conn.execute(query.values(revoked_at=now))
    return bool(result.rowcount)


async def get_key(tx: Tx, team_id: str, key_id: str) -> ApiKey | None:
    """The team's key with this id, revoked or not (what a job started with it acts as)."""
    query = select(api_keys).where(api_keys.c.team_id == team_id, api_keys.c.id == key_id)
    row = (await tx.conn.execute(query)).first()
    return _key(row) if row else None
