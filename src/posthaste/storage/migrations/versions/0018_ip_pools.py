"""IP pools: the pool of each stream and domain, and each source address's daily count

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pool_addresses",
        sa.Column("address", sa.String(length=45), nullable=False),
        sa.Column("first_day", sa.Integer(), nullable=False),
        sa.Column("day", sa.Integer(), nullable=False),
        sa.Column("sent", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("address", name=op.f("pk_pool_addresses")),
    )
    op.add_column("streams", sa.Column("pool", sa.String(length=64), nullable=True))
    op.add_column("domains", sa.Column("pool", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("domains") as batch:
        batch.drop_column("pool")
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("pool")
    op.drop_table("pool_addresses")
