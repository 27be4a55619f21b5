"""Audiences: contacts, segments and their members, topics and contacts' choices

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)


def _fk(table: str, column: str, parent: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{parent}.id"], name=op.f(f"fk_{table}_{column}_{parent}"), ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "contacts",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("email_key", sa.String(length=320), nullable=False),
        sa.Column("first_name", sa.String(length=200), nullable=True),
        sa.Column("last_name", sa.String(length=200), nullable=True),
        sa.Column("unsubscribed", sa.Boolean(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        _fk("contacts", "team_id", "teams"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contacts")),
        sa.UniqueConstraint("team_id", "email_key", name="uq_contacts_team_email"),
    )
    op.create_index("ix_contacts_team_created", "contacts", ["team_id", "created_at", "id"])

    op.create_table(
        "segments",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        _fk("segments", "team_id", "teams"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_segments")),
    )
    op.create_index("ix_segments_team_created", "segments", ["team_id", "created_at", "id"])

    op.create_table(
        "segment_members",
        sa.Column("segment_id", ID, nullable=False),
        sa.Column("contact_id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        _fk("segment_members", "segment_id", "segments"),
        _fk("segment_members", "contact_id", "contacts"),
        sa.PrimaryKeyConstraint("segment_id", "contact_id", name=op.f("pk_segment_members")),
    )
    op.create_index("ix_segment_members_contact", "segment_members", ["contact_id"])

    op.create_table(
        "topics",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("default_subscription", sa.String(length=8), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        _fk("topics", "team_id", "teams"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_topics")),
    )
    op.create_index("ix_topics_team_created", "topics", ["team_id", "created_at", "id"])

    op.create_table(
        "contact_topics",
        sa.Column("contact_id", ID, nullable=False),
        sa.Column("topic_id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("subscription", sa.String(length=8), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        _fk("contact_topics", "contact_id", "contacts"),
        _fk("contact_topics", "topic_id", "topics"),
        sa.PrimaryKeyConstraint("contact_id", "topic_id", name=op.f("pk_contact_topics")),
    )
    op.create_index("ix_contact_topics_topic", "contact_topics", ["topic_id"])


def downgrade() -> None:
    for table in ("contact_topics", "topics", "segment_members", "segments", "contacts"):
        op.drop_table(table)
