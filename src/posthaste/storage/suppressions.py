"""The per-team suppression list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, delete, select, tuple_

from posthaste.core.cursors import Position
from posthaste.core.models import Suppression
from posthaste.storage._dialect import among_bound, insert_for
from posthaste.storage.database import Tx
from posthaste.storage.tables import suppressions


def _suppression(row: Any) -> Suppression:
    return Suppression(
        row.id, row.team_id, row.email, row.origin, row.source_email_id, row.created_at
    )


async def add(tx: Tx, item: Suppression) -> Suppression:
    """Add an address; when it is already listed, the existing entry is returned."""
    await tx.conn.execute(
        insert_for(tx, suppressions)
        .values(
            id=item.id,
            team_id=item.team_id,
            email=item.email,
            origin=item.origin,
            source_email_id=item.source_email_id,
            created_at=item.created_at,
        )
        .on_conflict_do_nothing()
    )
    found = await get_by_email(tx, item.team_id, item.email)
    assert found is not None
    return found


async def get_by_email(tx: Tx, team_id: str, email: str) -> Suppression | None:
    query = select(suppressions).where(
        suppressions.c.team_id == team_id, suppressions.c.email == email
    )
    row = (await tx.conn.execute(query)).first()
    return _suppression(row) if row else None


async def get_by_id(tx: Tx, team_id: str, item_id: str) -> Suppression | None:
    query = select(suppressions).where(
        suppressions.c.team_id == team_id, suppressions.c.id == item_id
    )
    row = (await tx.conn.execute(query)).first()
    return _suppression(row) if row else None


# Built once per dialect: the send path asks for every group it stores, and building the
# statement (and its cache key) cost more than running it.
_LISTED = {
    dialect: select(suppressions.c.email).where(
        suppressions.c.team_id == bindparam("team_id"), listed
    )
    for dialect, listed in among_bound(suppressions.c.email, "emails").items()
}

# The same, for an autocommit unit's driver connection (``Tx.driver``).
_LISTED_PG = "SELECT email FROM suppressions WHERE team_id = $1 AND email = ANY($2::varchar[])"


async def find_listed(tx: Tx, team_id: str, addresses: Sequence[str]) -> list[str]:
    """Which of ``addresses`` (lookup form) are suppressed for the team."""
    if not addresses:
        return []
    if tx.driver is not None:
        rows = await tx.driver.fetch(_LISTED_PG, team_id, list(addresses))
        return [row[0] for row in rows]
    query = _LISTED[tx.conn.dialect.name]
    return [
        r.email
        for r in await tx.conn.execute(query, {"team_id": team_id, "emails": list(addresses)})
    ]


async def list_page(
    tx: Tx, team_id: str, origin: str | None, email: str | None, after: Position | None, limit: int
) -> list[Suppression]:
    query = select(suppressions).where(suppressions.c.team_id == team_id)
    if origin:
        query = query.where(suppressions.c.origin == origin)
    if email:
        query = query.where(suppressions.c.email == email)
    if after is not None:
        query = query.where(
            tuple_(suppressions.c.created_at, suppressions.c.id)
            < tuple_(after.created_at, after.id)
        )
    query = query.order_by(suppressions.c.created_at.desc(), suppressions.c.id.desc()).limit(limit)
    return [_suppression(r) for r in await tx.conn.execute(query)]


async def remove(tx: Tx, team_id: str, item_id: str) -> bool:
    query = delete(suppressions).where(
        suppressions.c.team_id == team_id, suppressions.c.id == item_id
    )
    return bool((await tx.conn.execute(query)).rowcount)
