"""Webhooks, their deliveries and attempts."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    text,
)

from posthaste.storage.tables._base import ID, MS, metadata

# --- Webhooks (issue 6) ---------------------------------------------------------------------


webhooks = Table(
    "webhooks",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("endpoint", Text, nullable=False),
    Column("events", JSON, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("secret", Text, nullable=False),  # SecretBox ciphertext
    Column("previous_secret", Text, nullable=True),  # still signs until previous_secret_until
    Column("previous_secret_until", MS, nullable=True),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    Index("ix_webhooks_team", "team_id", "enabled"),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("webhook_id", ID, ForeignKey("webhooks.id", ondelete="CASCADE"), primary_key=True),
    Column("event_id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("status", String(12), nullable=False),
    Column("attempts", Integer, nullable=False),
    # Claimable when due_at <= now; a claim pushes it out by the lease (like jobs.available_at);
    # NULL when there is nothing to do (delivered, failed, or paused on a disabled endpoint).
    Column("due_at", MS, nullable=True),
    Column("next_attempt_at", MS, nullable=True),
    Column("claims", Integer, nullable=False),  # fencing token of the current claim
    Column("replay_status", String(12), nullable=True),  # the end status a replay returns to
    Column("created_at", MS, nullable=False),
    # Partial: a finished delivery (due_at NULL) leaves the index, so its last update adds no
    # entry there and the index holds only what is claimable or leased.
    Index(
        "ix_webhook_deliveries_due",
        "due_at",
        postgresql_where=text("due_at IS NOT NULL"),
        sqlite_where=text("due_at IS NOT NULL"),
    ),
)

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("webhook_id", ID, ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=False),
    Column("event_id", ID, nullable=False),
    Column("team_id", ID, nullable=False),
    Column("attempted_at", MS, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("success", Boolean, nullable=False),
    Column("error", Text, nullable=True),
    Column("duration_ms", Integer, nullable=False),
    Column("response_body", Text, nullable=True),
    Index("ix_webhook_attempts_event", "webhook_id", "event_id", "id"),
    # No index on attempted_at: ids are UUIDv7 (time-ordered), so a retention purge deletes
    # by a range of the primary key and every delivery saves an index insert.
)
