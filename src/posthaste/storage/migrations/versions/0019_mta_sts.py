"""MTA-STS and TLS reporting: cached policies, daily TLS session counts, reports

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)


def upgrade() -> None:
    op.create_table(
        "mta_sts_policies",
        sa.Column("domain", sa.String(length=253), nullable=False),
        sa.Column("record_id", sa.String(length=32), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("fetched_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("domain", name=op.f("pk_mta_sts_policies")),
    )
    op.create_table(
        "tls_report_counts",
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("policy_domain", sa.String(length=253), nullable=False),
        sa.Column("policy_type", sa.String(length=20), nullable=False),
        sa.Column("policy_id", sa.String(length=32), nullable=False),
        sa.Column("result", sa.String(length=40), nullable=False),
        sa.Column("mx_host", sa.String(length=253), nullable=False),
        sa.Column("receiving_ip", sa.String(length=45), nullable=False),
        sa.Column("sessions", sa.BigInteger(), nullable=False),
        sa.Column("policy_text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "day",
            "policy_domain",
            "policy_type",
            "policy_id",
            "result",
            "mx_host",
            "receiving_ip",
            name=op.f("pk_tls_report_counts"),
        ),
    )
    op.create_table(
        "tls_reports",
        sa.Column("id", ID, nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("policy_domain", sa.String(length=253), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("deliveries", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tls_reports")),
        sa.UniqueConstraint("day", "policy_domain", name=op.f("uq_tls_reports_day")),
    )


def downgrade() -> None:
    op.drop_table("tls_reports")
    op.drop_table("tls_report_counts")
    op.drop_table("mta_sts_policies")
