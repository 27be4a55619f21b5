"""Each email records the entry point it came through: api, batch, relay, broadcast, automation

Emails stored before this migration came through the API, the batch endpoint or the relay,
which were not told apart; they read as ``api``. On PostgreSQL a column with a constant default
is added without rewriting the table.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "emails", sa.Column("origin", sa.String(16), nullable=False, server_default="api")
    )


def downgrade() -> None:
    with op.batch_alter_table("emails") as batch:
        batch.drop_column("origin")
