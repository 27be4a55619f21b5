"""The per-team suppression list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, select, tuple_

from posthaste.core.cursors import Position
from posthaste.core.models import Suppression
from posthaste.storage.database import Tx
from posthaste.storage.dialects import Forms, insert_for
from posthaste.storage.tables import suppressions

if TYPE_CHECKING:
    import sqlite3


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


async def find_listed(tx: Tx, team_id: str, addresses: Sequence[str]) -> list[str]:
    """Which of ``addresses`` (lookup form) are suppressed for the team."""
    if not addresses:
        return []
    return await tx.dialect.pick(_LISTED)(tx, team_id, addresses)


# The send path asks for every group it stores. PostgreSQL: one text, run on the unit's driver
# connection when it has one (``Tx.fetch_pg``); SQLite: built once (building the statement and
# its cache key cost more than running it).
_LISTED_PG = "SELECT email FROM suppressions WHERE team_id = $1 AND email = ANY($2::varchar[])"
_LISTED_SQLITE = select(suppressions.c.email).where(
    suppressions.c.team_id == bindparam("team_id"),
    suppressions.c.email.in_(bindparam("emails", expanding=True)),
)


async def _listed_postgres(tx: Tx, team_id: str, addresses: Sequence[str]) -> list[str]:
    return [row[0] for row in await tx.fetch_pg(_LISTED_PG, team_id, list(addresses))]


async def _listed_sqlite(tx: Tx, team_id: str, addresses: Sequence[str]) -> list[str]:
    params = {"team_id": team_id, "emails": list(addresses)}
    return [row.email for row in await tx.conn.execute(_LISTED_SQLITE, params)]


_LISTED = Forms(postgresql=_listed_postgres, sqlite=_listed_sqlite)

# The same check made with the writes that store a group of emails (``emails.store_rows``
# with ``unless_listed``): on SQLite in their hop to the connection's thread, first.
Recipient = tuple[str, str]  # (team id, address in lookup form)


def listed_on(connection: sqlite3.Connection, recipients: Sequence[Recipient]) -> list[Recipient]:
    """SQLite, on the connection's thread (``Tx.run_sqlite``): which ``recipients`` are
    listed, one query per team (``find_listed``'s)."""
    found: list[Recipient] = []
    for team_id, addresses in _by_team(recipients).items():
        marks = ", ".join("?" for _ in addresses)
        sql = f"SELECT email FROM suppressions WHERE team_id = ? AND email IN ({marks})"
        found.extend((team_id, row[0]) for row in connection.execute(sql, [team_id, *addresses]))
    return found


async def listed_among(tx: Tx, recipients: Sequence[Recipient]) -> list[Recipient]:
    """Which ``recipients`` are listed, by a query of their own (``find_listed`` per team)."""
    return [
        (team_id, address)
        for team_id, addresses in _by_team(recipients).items()
        for address in await find_listed(tx, team_id, addresses)
    ]


def _by_team(recipients: Sequence[Recipient]) -> dict[str, list[str]]:
    by_team: dict[str, list[str]] = {}
    for team_id, address in recipients:
        by_team.setdefault(team_id, []).append(address)
    return by_team


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
