"""Small helpers that hide the two dialects' differences from the repositories."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import ARRAY, Table, any_, bindparam
from sqlalchemy.dialects import postgresql, sqlite

from posthaste.storage.database import Tx


def is_postgres(tx: Tx) -> bool:
    return bool(tx.conn.dialect.name == "postgresql")


def insert_for(tx: Tx, table: Table) -> Any:
    """The dialect's INSERT, which offers ``on_conflict_do_nothing`` / ``_do_update``."""
    if is_postgres(tx):
        return postgresql.insert(table)
    return sqlite.insert(table)


def among(tx: Tx, column: Any, values: Collection[Any]) -> Any:
    """``column IN values``; on PostgreSQL ``column = ANY(:array)``: one statement text whatever
    the count, so asyncpg's prepared statement and its plan are reused by every batch (an
    ``IN`` of N parameters is a new statement, prepared and planned again, for every N)."""
    if is_postgres(tx):
        name = f"{column.table.name}_{column.name}_any"
        return column == any_(bindparam(name, list(values), type_=ARRAY(column.type)))
    return column.in_(list(values))
