"""MTA-STS: failed policy fetches are remembered; TLS report counts keep the sending address

``mta_sts_policies.fetch_error`` and ``fetch_detail``: a fetch that failed for a domain with no
usable policy is stored (``policy`` empty) so that it is not tried again at once and its result
type is counted in the TLS reports. ``tls_report_counts.sending_ip``: the source address of a
failed session (RFC 8460 ``sending-mta-ip``), part of the key. ``jobs.ref`` takes 255
characters: a policy refresh job's ref is the recipient domain. SQLite does not hold a column to
its declared length, so only PostgreSQL's column changes (no table rewrite: a longer varchar).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNT_KEY = [
    "day",
    "policy_domain",
    "policy_type",
    "policy_id",
    "result",
    "mx_host",
    "receiving_ip",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "jobs",
            "ref",
            type_=sa.String(length=255),
            existing_type=sa.String(length=64),
            existing_nullable=False,
        )
    op.add_column(
        "mta_sts_policies",
        sa.Column("fetch_error", sa.String(length=40), nullable=False, server_default=""),
    )
    op.add_column(
        "mta_sts_policies",
        sa.Column("fetch_detail", sa.Text(), nullable=False, server_default=""),
    )
    with op.batch_alter_table("tls_report_counts", recreate="always") as batch:
        batch.add_column(
            sa.Column("sending_ip", sa.String(length=45), nullable=False, server_default="")
        )
        batch.drop_constraint("pk_tls_report_counts", type_="primary")
        batch.create_primary_key("pk_tls_report_counts", [*_COUNT_KEY, "sending_ip"])


def downgrade() -> None:
    # The counts are working state (a day's, deleted once reported): those that name their
    # sending address would collide without it, and are dropped.
    op.execute("DELETE FROM tls_report_counts WHERE sending_ip <> ''")
    with op.batch_alter_table("tls_report_counts", recreate="always") as batch:
        batch.drop_constraint("pk_tls_report_counts", type_="primary")
        batch.drop_column("sending_ip")
        batch.create_primary_key("pk_tls_report_counts", _COUNT_KEY)
    op.execute("DELETE FROM mta_sts_policies WHERE policy = ''")  # failed fetches: unknown before
    with op.batch_alter_table("mta_sts_policies") as batch:
        batch.drop_column("fetch_detail")
        batch.drop_column("fetch_error")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DELETE FROM jobs WHERE length(ref) > 64")
        op.alter_column(
            "jobs",
            "ref",
            type_=sa.String(length=64),
            existing_type=sa.String(length=255),
            existing_nullable=False,
        )
