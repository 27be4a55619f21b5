"""Migration 0003 builds exactly the domain tables that ``storage/tables.py`` declares."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection

from posthaste.bootstrap import Services
from posthaste.storage.tables import metadata

DOMAIN_TABLES = {"domains", "domain_claims"}


def _table_of(diff: Any) -> str | None:
    item = diff[0] if isinstance(diff, list) else diff
    for part in item[1:]:
        name = getattr(part, "name", None)
        table = getattr(part, "table", None)
        if table is not None:
            return str(table.name)
        if isinstance(part, str) and part in DOMAIN_TABLES:
            return part
        if name in DOMAIN_TABLES:
            return str(name)
    return None


def _domain_diffs(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return [d for d in compare_metadata(context, metadata) if _table_of(d) in DOMAIN_TABLES]


async def test_the_migration_matches_the_table_definitions(services: Services) -> None:
    async with services.db.read() as tx:
        assert await tx.conn.run_sync(_domain_diffs) == []
