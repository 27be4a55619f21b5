"""Webhook endpoints, their deliveries and attempts; the live stream's commit-safe position

``events.txid`` (PostgreSQL) is the inserting transaction's id, filled by a column default; the
stream reads events below its snapshot's xmin in ``(txid, id)`` order, so an event committed
late by a long transaction is never skipped. SQLite serialises writers, so ``rowid`` order is
commit order there; an index on ``events(team_id)`` (which SQLite extends with the rowid) serves
the stream's range reads.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)


def upgrade() -> None:
    _event_positions()
    op.create_table(
        "webhooks",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("endpoint", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_secret_until", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["team_id"], ["teams.id"], name=op.f("fk_webhooks_team_id_teams"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index("ix_webhooks_team", "webhooks", ["team_id", "enabled"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("webhook_id", ID, nullable=False),
        sa.Column("event_id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("due_at", sa.BigInteger(), nullable=True),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=True),
        sa.Column("claims", sa.Integer(), nullable=False),
        sa.Column("replay_status", sa.String(length=12), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_webhook_deliveries_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("webhook_id", "event_id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["due_at"],
        postgresql_where=sa.text("due_at IS NOT NULL"),
        sqlite_where=sa.text("due_at IS NOT NULL"),
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", ID, nullable=False),
        sa.Column("webhook_id", ID, nullable=False),
        sa.Column("event_id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("attempted_at", sa.BigInteger(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_webhook_attempts_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_attempts")),
    )
    op.create_index(
        "ix_webhook_attempts_event", "webhook_attempts", ["webhook_id", "event_id", "id"]
    )


def _event_positions() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # Added without a default (no table rewrite), then the default applies to new rows;
        # older rows keep NULL and sort before every new one (the stream reads them as txid 0).
        op.add_column("events", sa.Column("txid", sa.BigInteger(), nullable=True))
        op.execute(
            "ALTER TABLE events ALTER COLUMN txid SET DEFAULT (pg_current_xact_id()::text::bigint)"
        )
        op.execute("UPDATE events SET txid = 0 WHERE txid IS NULL")
        op.execute("ALTER TABLE events ALTER COLUMN txid SET NOT NULL")
        op.create_index("ix_events_stream", "events", ["team_id", "txid", "id"])
    else:
        op.add_column("events", sa.Column("txid", sa.BigInteger(), nullable=True))
        op.create_index("ix_events_team_rowid", "events", ["team_id"])


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_events_stream", table_name="events")
    else:
        op.drop_index("ix_events_team_rowid", table_name="events")
    with op.batch_alter_table("events") as batch_op:
        batch_op.drop_column("txid")
