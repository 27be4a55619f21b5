"""Inbound mail and its attachments."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from posthaste.storage.tables._base import ID, MS, metadata

# Inbound mail (issue 21): every message the inbound server stored, its raw bytes kept once in
# ``blobs``. ``kind`` says what it was: ``received`` (mail for a receiving domain, what the
# API lists) or a message to a VERP address (``dsn``, ``complaint``, ``auto_reply``,
# ``unparseable``), kept for inspection beside the original email it named (``email_id``).
# Attachments are parts of the raw message (``part``: the MIME path), read from it on download.

received_emails = Table(
    "received_emails",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("email_id", ID, nullable=True),
    Column("mail_from", Text, nullable=False),
    Column("from_address", Text, nullable=False),
    Column("from_lookup", String(320), nullable=False),
    Column("to", JSON, nullable=False),
    Column("cc", JSON, nullable=False),
    Column("reply_to", JSON, nullable=False),
    Column("received_for", JSON, nullable=False),
    Column("subject", Text, nullable=False),
    Column("html", Text, nullable=True),
    Column("text", Text, nullable=True),
    Column("headers", JSON, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("authentication", JSON, nullable=False),
    Column("raw_blob_id", ID, nullable=False),
    Column("size", Integer, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_received_emails_team_kind", "team_id", "kind", "created_at", "id"),
    Index("ix_received_emails_team_from", "team_id", "from_lookup", "created_at", "id"),
)

received_recipients = Table(
    "received_recipients",
    metadata,
    Column("email_id", ID, primary_key=True),
    Column("address", String(320), primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_received_recipients_lookup", "team_id", "address", "created_at", "email_id"),
)

received_attachments = Table(
    "received_attachments",
    metadata,
    Column("id", ID, primary_key=True),
    Column("email_id", ID, nullable=False),
    Column("team_id", ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("part", String(200), nullable=False),
    Column("filename", Text, nullable=True),
    Column("content_type", String(255), nullable=False),
    Column("size", Integer, nullable=False),
    Column("content_id", String(255), nullable=True),
    Column("disposition", String(16), nullable=False),
    Index("ix_received_attachments_email", "email_id", "position"),
)
