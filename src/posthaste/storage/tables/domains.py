"""Sending domains with their DKIM keys and claims, and the delivery attempts' sessions."""

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
    UniqueConstraint,
)

from posthaste.storage.tables._base import ID, MS, metadata

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
    # The IP pool its mail leaves from (mx delivery) when the stream names none; None: none.
    Column("pool", String(64), nullable=True),
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
