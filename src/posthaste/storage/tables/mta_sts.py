"""MTA-STS and TLS reporting: the cached policies, the daily session counts, the reports.

Machine-wide, not team-owned: a recipient domain's policy and the TLS sessions with its MX
hosts concern the whole service (``core/mta_sts.py``, ``core/tls_reports.py``).
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, String, Table, Text, UniqueConstraint

from posthaste.storage.tables._base import ID, MS, metadata

# The policy of each recipient domain, as last fetched, kept until ``expires_at`` (max_age);
# or, with ``policy`` empty, a fetch that failed (not tried again before ``expires_at``).
mta_sts_policies = Table(
    "mta_sts_policies",
    metadata,
    Column("domain", String(253), primary_key=True),
    Column("record_id", String(32), nullable=False),  # the _mta-sts TXT record's id
    Column("policy", Text, nullable=False),  # the policy file as served ('' : the fetch failed)
    Column("fetched_at", MS, nullable=False),
    Column("expires_at", MS, nullable=False),
    # A failed fetch: its RFC 8460 result type and what went wrong ('' when fetched).
    Column("fetch_error", String(40), nullable=False, server_default=""),
    Column("fetch_detail", Text, nullable=False, server_default=""),
)

# TLS sessions per UTC day, policy domain, policy and outcome: what the daily reports count.
tls_report_counts = Table(
    "tls_report_counts",
    metadata,
    Column("day", String(10), primary_key=True),  # YYYY-MM-DD
    Column("policy_domain", String(253), primary_key=True),
    Column("policy_type", String(20), primary_key=True),
    Column("policy_id", String(32), primary_key=True),
    Column("result", String(40), primary_key=True),
    Column("mx_host", String(253), primary_key=True),
    Column("receiving_ip", String(45), primary_key=True),
    # The source address of the session ('' when unknown, and for successes).
    Column("sending_ip", String(45), primary_key=True, server_default=""),
    Column("sessions", BigInteger, nullable=False),
    Column("policy_text", Text, nullable=False),
)

# Each report produced, with what became of each of its rua addresses.
tls_reports = Table(
    "tls_reports",
    metadata,
    Column("id", ID, primary_key=True),
    Column("day", String(10), nullable=False),
    Column("policy_domain", String(253), nullable=False),
    Column("report", JSON, nullable=False),
    # [{rua, status: sent|retrying|failed|not_sent, detail, tries}]
    Column("deliveries", JSON, nullable=False),
    Column("created_at", MS, nullable=False),
    UniqueConstraint("day", "policy_domain"),
)
