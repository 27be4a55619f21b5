"""Resend-style pages of a team's list: the items after (or before) one of them, in list order.

A list is ordered by ``(created_at, id)``, unique and total. The page after an item holds the
rows strictly past it in the list's order; the page before it the rows strictly ahead of it,
read backwards from it (the nearest first) and then turned round into the list's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, Table, select, tuple_

from posthaste.core.cursors import Position
from posthaste.core.ids import is_uuid
from posthaste.storage.database import Tx

T = TypeVar("T")
ListTable = Table  # a team's table listed by (created_at, id), as services name it


async def position_of(tx: Tx, table: Table, team_id: str, item_id: str) -> Position | None:
    """Where the team's item with this id sits; None when the team has no such item."""
    if not is_uuid(item_id):
        return None
    item_id = item_id.lower()
    query = select(table.c.created_at).where(table.c.team_id == team_id, table.c.id == item_id)
    row = (await tx.conn.execute(query)).first()
    return Position(row.created_at, item_id) if row else None


def keyset_page(
    query: Select[Any],
    created_at: ColumnElement[Any],
    row_id: ColumnElement[Any],
    *,
    newest_first: bool,
    position: Position | None,
    backwards: bool,
    limit: int,
) -> Select[Any]:
    """``limit`` rows past ``position`` (ahead of it when ``backwards``) in the list's order."""
    descending = newest_first != backwards
    if position is not None:
        key, at = tuple_(created_at, row_id), tuple_(position.created_at, position.id)
        query = query.where(key < at if descending else key > at)
    if descending:
        return query.order_by(created_at.desc(), row_id.desc()).limit(limit)
    return query.order_by(created_at.asc(), row_id.asc()).limit(limit)


def cut(rows: Sequence[T], limit: int, *, backwards: bool) -> tuple[list[T], bool]:
    """The page (in list order) from ``limit + 1`` rows read, and whether more lie beyond it."""
    items = list(rows[:limit])
    if backwards:
        items.reverse()
    return items, len(rows) > limit


async def read_page(
    tx: Tx,
    table: Table,
    query: Select[Any],
    read: Callable[[Any], T],
    *,
    team_id: str,
    limit: int,
    anchor: str | None,
    newest_first: bool,
    backwards: bool,
) -> tuple[list[T], bool] | None:
    """A page of the team's ``table`` (rows of ``query``, each ``read`` into its record) after
    the item ``anchor`` (before it when ``backwards``), and whether more lie beyond; None when
    the team has no such item."""
    position = None
    if anchor is not None:
        position = await position_of(tx, table, team_id, anchor)
        if position is None:
            return None
    paged = keyset_page(
        query.where(table.c.team_id == team_id),
        table.c.created_at,
        table.c.id,
        newest_first=newest_first,
        position=position,
        backwards=backwards,
        limit=limit + 1,
    )
    rows = [read(row) for row in await tx.conn.execute(paged)]
    return cut(rows, limit, backwards=backwards)
