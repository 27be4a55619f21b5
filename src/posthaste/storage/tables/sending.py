"""The send path's tables: teams and keys, streams, blobs, emails with their recipients, tags,
subjects and attachments, events, the job queue, idempotency keys, suppressions and limits."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
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

teams = Table(
    "teams",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("rate_limit", Integer, nullable=False),
    Column("daily_quota", Integer, nullable=False),
    Column("created_at", MS, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("token_hint", String(20), nullable=False),
    Column("mode", String(8), nullable=False),
    Column("permission", String(20), nullable=False),
    Column("domain_id", ID, nullable=True),
    Column("created_at", MS, nullable=False),
    Column("last_used_at", MS, nullable=True),
    Column("revoked_at", MS, nullable=True),
    Index("ix_api_keys_team", "team_id", "created_at"),
)

streams = Table(
    "streams",
    metadata,
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True),
    Column("id", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("type", String(16), nullable=False),
    Column("created_at", MS, nullable=False),
    # The IP pool its mail leaves from (mx delivery), over its sending domain's; None: none.
    Column("pool", String(64), nullable=True),
)

blobs = Table(
    "blobs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_blobs_created", "created_at"),
)

# The send path's tables (emails and their recipients, tags, subjects and attachments) declare
# no foreign keys: one statement writes an email and its children from the same ids, and a key
# re-checked that per row at a fifth to a quarter of the statement's cost (migration 0009).
emails = Table(
    "emails",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("mode", String(8), nullable=False),
    Column("from_address", Text, nullable=False),
    Column("from_lookup", String(320), nullable=False),
    Column("to", JSON, nullable=False),
    Column("cc", JSON, nullable=False),
    Column("bcc", JSON, nullable=False),
    Column("reply_to", JSON, nullable=False),
    Column("subject", Text, nullable=False),
    Column("html", Text, nullable=True),
    Column("text", Text, nullable=True),
    Column("headers", JSON, nullable=False),
    Column("tags", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("last_event", String(40), nullable=False),
    Column("created_at", MS, nullable=False),
    Column("scheduled_at", MS, nullable=True),
    Column("sent_at", MS, nullable=True),
    Column("template_id", ID, nullable=True),
    Column("stream_id", String(64), nullable=False),
    Column("broadcast_id", ID, nullable=True),
    Column("message_id", String(400), nullable=False),
    Column("provider_message_id", String(400), nullable=True),
    Column("region", String(40), nullable=False),
    Column("raw_blob_id", ID, nullable=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("origin", String(16), nullable=False, server_default="api"),
    # Keyset pagination: every list filter walks one of these newest-first.
    Index("ix_emails_team_created", "team_id", "created_at", "id"),
    Index("ix_emails_team_status", "team_id", "status", "created_at", "id"),
    Index("ix_emails_team_stream", "team_id", "stream_id", "created_at", "id"),
    Index("ix_emails_team_from", "team_id", "from_lookup", "created_at", "id"),
)

email_recipients = Table(
    "email_recipients",
    metadata,
    Column("email_id", ID, primary_key=True),
    Column("address", String(320), primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("kind", String(4), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_email_recipients_lookup", "team_id", "address", "created_at", "email_id"),
)

email_tags = Table(
    "email_tags",
    metadata,
    Column("email_id", ID, primary_key=True),
    Column("key", String(256), primary_key=True),
    Column("value", String(256), nullable=False),
    Column("team_id", ID, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_email_tags_lookup", "team_id", "key", "value", "created_at", "email_id"),
)

# The subject filter's own table (insert-only): its trigram GIN index (PostgreSQL, migration
# 0007) lives here rather than on ``emails``, whose rows are rewritten at every status change;
# each new row version would otherwise add all of the subject's trigrams to the index again.
email_subjects = Table(
    "email_subjects",
    metadata,
    Column("email_id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("subject", Text, nullable=False),
)

attachments = Table(
    "attachments",
    metadata,
    Column("id", ID, primary_key=True),
    Column("email_id", ID, nullable=False),
    Column("team_id", ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("filename", Text, nullable=False),
    Column("content_type", String(255), nullable=False),
    Column("size", Integer, nullable=False),
    Column("content_id", String(255), nullable=True),
    Column("blob_id", ID, nullable=False),
    Index("ix_attachments_email", "email_id", "position"),
)

events = Table(
    "events",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("type", String(40), nullable=False),
    Column("email_id", ID, nullable=True),
    Column("created_at", MS, nullable=False),
    Column("data", JSON, nullable=False),
    # An email's events (``emails.list_events``). No index on (team_id, id): nothing read it
    # (migration 0024); the stream has its own, below.
    Index("ix_events_email", "email_id", "id"),
)

# The live stream reads events in commit-safe order. PostgreSQL: ``txid`` is the inserting
# transaction's id (DEFAULT pg_current_xact_id()), and a reader takes only events whose txid is
# below its snapshot's xmin, so no transaction still running can later add an event before the
# reader's position. SQLite: writers are serialised, so the implicit rowid is already in commit
# order and ``txid`` stays NULL.
events.append_column(Column("txid", BigInteger, nullable=True))

jobs = Table(
    "jobs",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("kind", String(40), nullable=False),
    # What the job is about: an id, or a recipient domain (255 since migration 0021).
    Column("ref", String(255), nullable=False),
    Column("team_id", ID, nullable=True),
    # A job is due when available_at <= now; claiming it pushes available_at out by the lease,
    # so a job whose worker died becomes due again by itself when the lease runs out.
    Column("available_at", MS, nullable=False),
    # Claims, ever growing: the fencing token of the worker holding the job.
    Column("attempts", Integer, nullable=False),
    # Times the job went back unsent because its destination was busy (migration 0020); the
    # claims that counted are ``attempts - holds``.
    Column("holds", Integer, nullable=False, server_default="0"),
    # Why it was last put back unsent (migration 0022): its next attempt's transcript says so.
    Column("hold_reason", Text, nullable=True),
    Column("locked_by", String(64), nullable=True),
    Column("created_at", MS, nullable=False),
    # In claim order: a claim reads the first due entries and stops (migration 0011).
    Index("ix_jobs_available", "available_at", "id"),
    # ``ref`` first: an index led by ``kind`` drew PostgreSQL's claim plan to fetch every due
    # job of the claimed kinds and sort them (migration 0011).
    Index("ix_jobs_ref", "ref", "kind"),
    # A claim lane's jobs of one kind in due order (migration 0023, ``jobs.claim_lanes``).
    Index("ix_jobs_kind_due", "kind", "available_at", "id"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("team_id", ID, primary_key=True),
    Column("key", String(256), primary_key=True),
    Column("request_hash", String(64), nullable=False),
    Column("state", String(12), nullable=False),
    Column("response_status", Integer, nullable=True),
    Column("response_body", Text, nullable=True),
    Column("locked_until", MS, nullable=False),
    Column("expires_at", MS, nullable=False),
    Index("ix_idempotency_expires", "expires_at"),
)

suppressions = Table(
    "suppressions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("email", String(320), nullable=False),
    Column("origin", String(16), nullable=False),
    Column("source_email_id", ID, nullable=True),
    Column("created_at", MS, nullable=False),
    UniqueConstraint("team_id", "email", name="uq_suppressions_team_email"),
    Index("ix_suppressions_team_created", "team_id", "created_at", "id"),
)

rate_limits = Table(
    "rate_limits",
    metadata,
    Column("team_id", ID, primary_key=True),
    # GCRA: the theoretical arrival time of the next request, epoch microseconds.
    Column("tat", BigInteger, nullable=False),
)

daily_usage = Table(
    "daily_usage",
    metadata,
    Column("team_id", ID, primary_key=True),
    Column("day", Integer, primary_key=True),
    Column("count", Integer, nullable=False),
)
