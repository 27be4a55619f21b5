"""Destinations: the throttle of each receiving destination and the replies behind it

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)


def upgrade() -> None:
    op.create_table(
        "destinations",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("mx_hosts", sa.JSON(), nullable=False),
        sa.Column("interval_us", sa.BigInteger(), nullable=False),
        sa.Column("next_slot_us", sa.BigInteger(), nullable=False),
        sa.Column("suspended_until", sa.BigInteger(), nullable=False),
        sa.Column("strikes", sa.Integer(), nullable=False),
        sa.Column("ceiling_us", sa.BigInteger(), nullable=False),
        sa.Column("changed_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_destinations")),
    )
    op.create_table(
        "destination_replies",
        sa.Column("id", ID, nullable=False),
        sa.Column("destination", sa.String(length=253), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("reply", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["destination"],
            ["destinations.name"],
            name=op.f("fk_destination_replies_destination_destinations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_destination_replies")),
    )
    op.create_index(
        "ix_destination_replies_destination_at",
        "destination_replies",
        ["destination", "at"],
    )


def downgrade() -> None:
    op.drop_table("destination_replies")
    op.drop_table("destinations")
