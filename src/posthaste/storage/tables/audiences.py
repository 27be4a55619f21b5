"""Audiences: contacts, segments, topics and imports."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from posthaste.storage.tables._base import ID, MS, metadata

# Audiences: contacts, segments (explicit lists of contacts) and topics (subscription
# preferences). ``email`` is the address as stored (ASCII domain), ``email_key`` its lower-cased
# lookup form, unique per team. A membership or a topic choice goes with its contact, segment or
# topic (ON DELETE CASCADE).

contacts = Table(
    "contacts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("email", String(320), nullable=False),
    Column("email_key", String(320), nullable=False),
    Column("first_name", String(200), nullable=True),
    Column("last_name", String(200), nullable=True),
    Column("unsubscribed", Boolean, nullable=False),
    Column("properties", JSON, nullable=False),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    UniqueConstraint("team_id", "email_key", name="uq_contacts_team_email"),
    Index("ix_contacts_team_created", "team_id", "created_at", "id"),
)

segments = Table(
    "segments",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_segments_team_created", "team_id", "created_at", "id"),
)

segment_members = Table(
    "segment_members",
    metadata,
    Column("segment_id", ID, ForeignKey("segments.id", ondelete="CASCADE"), primary_key=True),
    Column("contact_id", ID, ForeignKey("contacts.id", ondelete="CASCADE"), primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_segment_members_contact", "contact_id"),
)

topics = Table(
    "topics",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("description", Text, nullable=True),
    Column("default_subscription", String(8), nullable=False),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    Index("ix_topics_team_created", "team_id", "created_at", "id"),
)

contact_topics = Table(
    "contact_topics",
    metadata,
    Column("contact_id", ID, ForeignKey("contacts.id", ondelete="CASCADE"), primary_key=True),
    Column("topic_id", ID, ForeignKey("topics.id", ondelete="CASCADE"), primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("subscription", String(8), nullable=False),
    Column("updated_at", MS, nullable=False),
    Index("ix_contact_topics_topic", "topic_id"),
)

# Contact imports: the import with its progress (``next_part`` and the counts move together,
# in the transaction that writes a part's contacts), and the uploaded CSV cut into parts of
# ``core.contact_imports.PART_ROWS`` lines, deleted once the import has finished.

contact_imports = Table(
    "contact_imports",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("on_conflict", String(8), nullable=False),
    Column("segment_ids", JSON, nullable=False),
    Column("header", JSON, nullable=False),
    Column("parts", Integer, nullable=False),
    Column("next_part", Integer, nullable=False),
    Column("total", Integer, nullable=False),
    Column("created", Integer, nullable=False),
    Column("updated", Integer, nullable=False),
    Column("skipped", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("errors", JSON, nullable=False),
    Column("created_at", MS, nullable=False),
    Column("completed_at", MS, nullable=True),
    Index("ix_contact_imports_team_created", "team_id", "created_at", "id"),
)

contact_import_parts = Table(
    "contact_import_parts",
    metadata,
    Column("import_id", ID, ForeignKey("contact_imports.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("first_line", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
)
