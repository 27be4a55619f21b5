"""Delivery attempts with their SMTP transcripts

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "delivery_attempts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("team_id", sa.String(length=36), nullable=False),
        sa.Column("email_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("attempted_at", sa.BigInteger(), nullable=False),
        sa.Column("transport", sa.String(length=16), nullable=False),
        sa.Column("host", sa.String(length=300), nullable=True),
        sa.Column("recipients", sa.JSON(), nullable=False),
        sa.Column("replies", sa.JSON(), nullable=False),
        sa.Column("transcript", sa.JSON(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["email_id"],
            ["emails.id"],
            name=op.f("fk_delivery_attempts_email_id_emails"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_attempts")),
    )
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_delivery_attempts_email", ["email_id", "id"], unique=False)
        batch_op.create_index("ix_delivery_attempts_created", ["attempted_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_delivery_attempts_created")
        batch_op.drop_index("ix_delivery_attempts_email")
    op.drop_table("delivery_attempts")
