"""Event definitions: a custom event's name with an optional schema of its payload

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)


def upgrade() -> None:
    op.create_table(
        "event_definitions",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("schema", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["team_id"],
            ["teams.id"],
            name=op.f("fk_event_definitions_team_id_teams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event_definitions")),
        sa.UniqueConstraint("team_id", "name", name="uq_event_definitions_team_name"),
    )
    op.create_index(
        "ix_event_definitions_team_created",
        "event_definitions",
        ["team_id", "created_at", "id"],
    )


def downgrade() -> None:
    op.drop_table("event_definitions")
