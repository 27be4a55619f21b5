"""Migrations 0003, 0007, 0009, 0010, 0017, 0019 and 0021 build exactly the tables that
``storage/tables`` declares."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection

from posthaste.bootstrap import Services
from posthaste.storage.tables import metadata

DOMAIN_TABLES = {
    "domains",
    "domain_claims",
    "email_subjects",
    # migration 0009: the send path's tables without foreign keys
    "emails",
    "email_recipients",
    "email_tags",
    "attachments",
    # migration 0010: audiences
    "contacts",
    "segments",
    "segment_members",
    "topics",
    "contact_topics",
    # migration 0017: destinations
    "destinations",
    "destination_replies",
    # migrations 0019 and 0021: MTA-STS and TLS reporting
    "mta_sts_policies",
    "tls_report_counts",
    "tls_reports",
}


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


def _optional_trigram_index(diff: Any) -> bool:
    """The subject's trigram index exists only where ``pg_trgm`` could be created (migration
    0007), so ``tables.py`` does not declare it."""
    return diff[0] == "remove_index" and diff[1].name == "ix_email_subjects_trgm"


def _domain_diffs(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return [
        d
        for d in compare_metadata(context, metadata)
        if _table_of(d) in DOMAIN_TABLES and not _optional_trigram_index(d)
    ]


async def test_the_migration_matches_the_table_definitions(services: Services) -> None:
    async with services.db.read() as tx:
        assert await tx.conn.run_sync(_domain_diffs) == []
