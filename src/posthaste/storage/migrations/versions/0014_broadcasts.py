"""Broadcasts: an email to every member of a segment, expanded in chunks with a kept cursor

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)
COUNTS = (
    "recipients",
    "sent",
    "skipped_unsubscribed",
    "skipped_suppressed",
    "skipped_topic",
    "failed",
)


def upgrade() -> None:
    op.create_table(
        "broadcasts",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("api_key_id", ID, nullable=True),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("segment_id", ID, nullable=False),
        sa.Column("topic_id", ID, nullable=True),
        sa.Column("from_address", sa.Text(), nullable=False),
        sa.Column("reply_to", sa.JSON(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=True),
        sa.Column("html", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("template", sa.String(length=200), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("stream_id", sa.String(length=64), nullable=False),
        sa.Column("preview_text", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("scheduled_at", sa.BigInteger(), nullable=True),
        sa.Column("sent_at", sa.BigInteger(), nullable=True),
        sa.Column("resumes_at", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cursor", ID, nullable=True),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in COUNTS),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["team_id"],
            ["teams.id"],
            name=op.f("fk_broadcasts_team_id_teams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_broadcasts")),
    )
    op.create_index("ix_broadcasts_team_created", "broadcasts", ["team_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_table("broadcasts")
