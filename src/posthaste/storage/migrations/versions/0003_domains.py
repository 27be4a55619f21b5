"""Domains, their DNS records, DKIM keys and claims

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "domains",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("team_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("region", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("records", sa.JSON(), nullable=False),
        sa.Column("dkim_selector", sa.String(length=63), nullable=False),
        sa.Column("key_provider", sa.String(length=40), nullable=False),
        sa.Column("dkim_private_key", sa.Text(), nullable=True),
        sa.Column("open_tracking", sa.Boolean(), nullable=False),
        sa.Column("click_tracking", sa.Boolean(), nullable=False),
        sa.Column("tls", sa.String(length=16), nullable=False),
        sa.Column("receiving", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("verified_at", sa.BigInteger(), nullable=True),
        sa.Column("checking_since", sa.BigInteger(), nullable=True),
        sa.Column("last_checked_at", sa.BigInteger(), nullable=True),
        sa.Column("claim_token", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["team_id"], ["teams.id"], name=op.f("fk_domains_team_id_teams"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_domains")),
        sa.UniqueConstraint("team_id", "name", name="uq_domains_team_name"),
    )
    with op.batch_alter_table("domains", schema=None) as batch_op:
        batch_op.create_index("ix_domains_team_created", ["team_id", "created_at", "id"])
        batch_op.create_index("ix_domains_name_verified", ["name", "verified_at"])

    op.create_table(
        "domain_claims",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("team_id", sa.String(length=36), nullable=False),
        sa.Column("domain_id", sa.String(length=36), nullable=False),
        sa.Column("claimed_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["domain_id"],
            ["domains.id"],
            name=op.f("fk_domain_claims_domain_id_domains"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_domain_claims")),
    )
    with op.batch_alter_table("domain_claims", schema=None) as batch_op:
        batch_op.create_index("ix_domain_claims_domain", ["domain_id"])


def downgrade() -> None:
    op.drop_table("domain_claims")
    op.drop_table("domains")
