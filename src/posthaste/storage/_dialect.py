"""Small helpers that hide the two dialects' differences from the repositories."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite

from posthaste.storage.database import Tx


def insert_for(tx: Tx, table: Table) -> Any:
    """The dialect's INSERT, which offers ``on_conflict_do_nothing`` / ``_do_update``."""
    if tx.conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)
