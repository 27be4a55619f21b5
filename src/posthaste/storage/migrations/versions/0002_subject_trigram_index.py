"""Trigram index for the case-insensitive subject filter (PostgreSQL only)

``GET /emails?subject=`` is a substring match. Walking the team's emails newest-first finds
common words at once but scans the whole history for a rare one; a trigram GIN index on
``lower(subject)`` lets PostgreSQL find rare matches directly. ``pg_trgm`` is a trusted
extension (PostgreSQL 13+): a database owner may create it. When it cannot be created, the index
is skipped with a warning and the filter still works, only without the index.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import logging
from collections.abc import Sequence

from alembic import op
from sqlalchemy.exc import DBAPIError

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DBAPIError as exc:
        log.warning("pg_trgm unavailable (%s); the subject filter runs without its index", exc.orig)
        return
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_emails_subject_trgm ON emails "
        "USING gin (lower(subject) gin_trgm_ops)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_emails_subject_trgm")
