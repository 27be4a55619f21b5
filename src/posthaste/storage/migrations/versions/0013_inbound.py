"""Inbound mail: received emails (and reports to VERP addresses), their recipients and attachments

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)
MS = sa.BigInteger()


def upgrade() -> None:
    op.create_table(
        "received_emails",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("email_id", ID, nullable=True),
        sa.Column("mail_from", sa.Text(), nullable=False),
        sa.Column("from_address", sa.Text(), nullable=False),
        sa.Column("from_lookup", sa.String(length=320), nullable=False),
        sa.Column("to", sa.JSON(), nullable=False),
        sa.Column("cc", sa.JSON(), nullable=False),
        sa.Column("reply_to", sa.JSON(), nullable=False),
        sa.Column("received_for", sa.JSON(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("html", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("authentication", sa.JSON(), nullable=False),
        sa.Column("raw_blob_id", ID, nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", MS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_received_emails")),
    )
    op.create_index(
        "ix_received_emails_team_kind",
        "received_emails",
        ["team_id", "kind", "created_at", "id"],
    )
    op.create_index(
        "ix_received_emails_team_from",
        "received_emails",
        ["team_id", "from_lookup", "created_at", "id"],
    )
    op.create_table(
        "received_recipients",
        sa.Column("email_id", ID, nullable=False),
        sa.Column("address", sa.String(length=320), nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("created_at", MS, nullable=False),
        sa.PrimaryKeyConstraint("email_id", "address", name=op.f("pk_received_recipients")),
    )
    op.create_index(
        "ix_received_recipients_lookup",
        "received_recipients",
        ["team_id", "address", "created_at", "email_id"],
    )
    op.create_table(
        "received_attachments",
        sa.Column("id", ID, nullable=False),
        sa.Column("email_id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("part", sa.String(length=200), nullable=False),
        sa.Column("filename", sa.Text(), nullable=True),
        sa.Column("content_type", sa.String(length=255), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("content_id", sa.String(length=255), nullable=True),
        sa.Column("disposition", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_received_attachments")),
    )
    op.create_index(
        "ix_received_attachments_email", "received_attachments", ["email_id", "position"]
    )


def downgrade() -> None:
    op.drop_table("received_attachments")
    op.drop_table("received_recipients")
    op.drop_table("received_emails")
