"""Table definitions (SQLAlchemy Core). Migrations in ``migrations/versions`` create these.

Conventions: ids are UUIDv7 strings (time-ordered), timestamps are epoch milliseconds (BIGINT),
which sort and compare identically on SQLite and PostgreSQL. Every team-owned row carries
``team_id`` and every query filters on it.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(36)
MS = BigInteger

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
    Index("ix_events_email", "email_id", "id"),
    Index("ix_events_team", "team_id", "id"),
)

jobs = Table(
    "jobs",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("kind", String(40), nullable=False),
    Column("ref", String(64), nullable=False),
    Column("team_id", ID, nullable=True),
    # A job is due when available_at <= now; claiming it pushes available_at out by the lease,
    # so a job whose worker died becomes due again by itself when the lease runs out.
    Column("available_at", MS, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("locked_by", String(64), nullable=True),
    Column("created_at", MS, nullable=False),
    # In claim order: a claim reads the first due entries and stops (migration 0011).
    Index("ix_jobs_available", "available_at", "id"),
    # ``ref`` first: an index led by ``kind`` drew PostgreSQL's claim plan to fetch every due
    # job of the claimed kinds and sort them (migration 0011).
    Index("ix_jobs_ref", "ref", "kind"),
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

# Templates (issue 5): a template names its draft version (the latest content) and, once
# published, the version sends use. Versions are immutable: an edit writes a new version.

templates = Table(
    "templates",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("alias", String(64), nullable=True),
    Column("draft_version_id", ID, nullable=False),
    Column("published_version_id", ID, nullable=True),
    Column("published_at", MS, nullable=True),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    UniqueConstraint("team_id", "alias", name="uq_templates_team_alias"),
    Index("ix_templates_team_created", "team_id", "created_at", "id"),
)

template_versions = Table(
    "template_versions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("template_id", ID, ForeignKey("templates.id", ondelete="CASCADE"), nullable=False),
    Column("team_id", ID, nullable=False),
    Column("subject", Text, nullable=True),
    Column("html", Text, nullable=True),
    Column("text", Text, nullable=True),
    Column("variables", JSON, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_template_versions_template", "template_id"),
)

# --- Domains (issue 3): sending domains, their records and DKIM keys, and confirmed claims ---

domains = Table(
    "domains",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(253), nullable=False),
    Column("region", String(40), nullable=False),
    Column("status", String(20), nullable=False),
    # The issued record set with each record's last status (core.domains.DnsRecord.as_dict).
    Column("records", JSON, nullable=False),
    Column("dkim_selector", String(63), nullable=False),
    Column("key_provider", String(40), nullable=False),
    # SecretBox(secret_key, "dkim-key") ciphertext of the PEM; None when a provider holds it.
    Column("dkim_private_key", Text, nullable=True),
    Column("open_tracking", Boolean, nullable=False),
    Column("click_tracking", Boolean, nullable=False),
    Column("tls", String(16), nullable=False),
    Column("receiving", Boolean, nullable=False),
    Column("created_at", MS, nullable=False),
    # Set while the domain counts as verified; the earliest one owns an unclaimed name.
    Column("verified_at", MS, nullable=True),
    Column("checking_since", MS, nullable=True),
    Column("last_checked_at", MS, nullable=True),
    Column("claim_token", String(64), nullable=True),
    UniqueConstraint("team_id", "name", name="uq_domains_team_name"),
    Index("ix_domains_team_created", "team_id", "created_at", "id"),
    Index("ix_domains_name_verified", "name", "verified_at"),
)

domain_claims = Table(
    "domain_claims",
    metadata,
    # One confirmed claim per name across all teams: the primary key enforces it.
    Column("name", String(253), primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("domain_id", ID, ForeignKey("domains.id", ondelete="CASCADE"), nullable=False),
    Column("claimed_at", MS, nullable=False),
    Index("ix_domain_claims_domain", "domain_id"),
)

# --- Delivery (issue 4): one row per SMTP session of a delivery attempt --------------------

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("email_id", ID, nullable=False),  # no foreign key: migration 0011
    Column("attempt", Integer, nullable=False),
    Column("attempted_at", MS, nullable=False),
    Column("transport", String(16), nullable=False),
    Column("host", String(300), nullable=True),
    Column("recipients", JSON, nullable=False),
    Column("replies", JSON, nullable=False),
    Column("transcript", JSON, nullable=False),
    Column("duration_ms", Integer, nullable=False),
    Index("ix_delivery_attempts_email", "email_id", "id"),
    Index("ix_delivery_attempts_created", "attempted_at"),
)

# --- Webhooks and the live event stream (issue 6) ------------------------------------------

# The live stream reads events in commit-safe order. PostgreSQL: ``txid`` is the inserting
# transaction's id (DEFAULT pg_current_xact_id()), and a reader takes only events whose txid is
# below its snapshot's xmin, so no transaction still running can later add an event before the
# reader's position. SQLite: writers are serialised, so the implicit rowid is already in commit
# order and ``txid`` stays NULL.
events.append_column(Column("txid", BigInteger, nullable=True))

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

# Automations: a graph of steps (its versions: a changed graph is a new version; a run keeps the
# version it started with), and runs, each one contact's way through a version, with a row per
# step it reached (the primary key makes each step of a run happen at most once). A run's
# ``contact_id`` is no foreign key: a run outlives the contact it deleted.

automations = Table(
    "automations",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("mode", String(8), nullable=False),
    Column("version_id", ID, nullable=False),
    Column("trigger_event", String(100), nullable=False),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    Index("ix_automations_team_created", "team_id", "created_at", "id"),
    Index("ix_automations_team_trigger", "team_id", "trigger_event"),
)

automation_versions = Table(
    "automation_versions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("automation_id", ID, ForeignKey("automations.id", ondelete="CASCADE"), nullable=False),
    Column("team_id", ID, nullable=False),
    Column("graph", JSON, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_automation_versions_automation", "automation_id"),
)

automation_runs = Table(
    "automation_runs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("automation_id", ID, ForeignKey("automations.id", ondelete="CASCADE"), nullable=False),
    Column("version_id", ID, nullable=False),
    Column("contact_id", ID, nullable=False),
    Column("status", String(16), nullable=False),
    Column("current_step", String(64), nullable=True),
    Column("event", JSON, nullable=False),
    Column("waiting_for", String(100), nullable=True),
    Column("created_at", MS, nullable=False),
    Column("completed_at", MS, nullable=True),
    Index("ix_automation_runs_automation_created", "automation_id", "created_at", "id"),
    Index("ix_automation_runs_waiting", "team_id", "contact_id", "waiting_for"),
)

automation_run_steps = Table(
    "automation_run_steps",
    metadata,
    Column("run_id", ID, ForeignKey("automation_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(64), primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("type", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", MS, nullable=False),
    Column("completed_at", MS, nullable=True),
    Column("output", JSON, nullable=True),
    Column("error", Text, nullable=True),
)

# Event definitions (Resend's ``/events``): a custom event's name declared with an optional
# schema that ``POST /events/send`` checks its payload against. Unique name per team.

event_definitions = Table(
    "event_definitions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(100), nullable=False),
    Column("schema", JSON, nullable=True),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    UniqueConstraint("team_id", "name", name="uq_event_definitions_team_name"),
    Index("ix_event_definitions_team_created", "team_id", "created_at", "id"),
)

# Machine-wide, not team-owned: the throttle of each receiving destination (the registered
# domain of its primary MX host), shared by every worker of the fleet (core/destinations.py).
destinations = Table(
    "destinations",
    metadata,
    Column("name", String(253), primary_key=True),
    Column("mx_hosts", JSON, nullable=False),
    # The current pace: microseconds between two messages (the rate, inverted).
    Column("interval_us", BigInteger, nullable=False),
    # The earliest time (epoch microseconds) the next message may leave.
    Column("next_slot_us", BigInteger, nullable=False),
    Column("suspended_until", MS, nullable=False),
    Column("strikes", Integer, nullable=False),  # "slow down" replies in a row
    # The pace that was too fast at the last "slow down" (0: none yet): climb back to near it
    # quickly, then probe above it slowly.
    Column("ceiling_us", BigInteger, nullable=False),
    Column("changed_at", MS, nullable=False),  # the last change of the pace
    Column("updated_at", MS, nullable=False),
)

# The replies behind the throttle's decisions, the newest few per destination.
destination_replies = Table(
    "destination_replies",
    metadata,
    Column("id", ID, primary_key=True),
    Column(
        "destination",
        String(253),
        ForeignKey("destinations.name", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("at", MS, nullable=False),
    Column("reply", Text, nullable=False),
    Column("decision", Text, nullable=False),
    Index("ix_destination_replies_destination_at", "destination", "at"),
)
