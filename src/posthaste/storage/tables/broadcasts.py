"""Broadcasts."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from posthaste.storage.tables._base import ID, MS, metadata

# Broadcasts: one email per member of a segment. ``cursor`` is the last contact id (members are
# expanded in contact id order) whose outcome is counted; it moves with the counts and the
# accepted emails in one transaction per chunk. No foreign key to the segment or topic: a
# broadcast keeps its record when they are deleted.

BROADCAST_COUNTS = (
    "recipients",
    "sent",
    "skipped_unsubscribed",
    "skipped_suppressed",
    "skipped_topic",
    "failed",
)

broadcasts = Table(
    "broadcasts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("api_key_id", ID, nullable=True),
    Column("name", String(200), nullable=True),
    Column("segment_id", ID, nullable=False),
    Column("topic_id", ID, nullable=True),
    Column("from_address", Text, nullable=False),
    Column("reply_to", JSON, nullable=False),
    Column("subject", Text, nullable=True),
    Column("html", Text, nullable=True),
    Column("text", Text, nullable=True),
    Column("template", String(200), nullable=True),
    Column("data", JSON, nullable=False),
    Column("stream_id", String(64), nullable=False),
    Column("preview_text", Text, nullable=True),
    Column("status", String(16), nullable=False),
    Column("scheduled_at", MS, nullable=True),
    Column("sent_at", MS, nullable=True),
    Column("resumes_at", MS, nullable=True),
    Column("error", Text, nullable=True),
    Column("cursor", ID, nullable=True),
    *(Column(name, Integer, nullable=False) for name in BROADCAST_COUNTS),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    Index("ix_broadcasts_team_created", "team_id", "created_at", "id"),
)
