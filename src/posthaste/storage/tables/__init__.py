"""Table definitions (SQLAlchemy Core). Migrations in ``migrations/versions`` create these.

Conventions: ids are UUIDv7 strings (time-ordered), timestamps are epoch milliseconds (BIGINT),
which sort and compare identically on SQLite and PostgreSQL. Every team-owned row carries
``team_id`` and every query filters on it.
"""

from __future__ import annotations

from posthaste.storage.tables._base import ID, MS, metadata
from posthaste.storage.tables.audiences import (
    contact_import_parts,
    contact_imports,
    contact_topics,
    contacts,
    segment_members,
    segments,
    topics,
)
from posthaste.storage.tables.automations import (
    automation_run_steps,
    automation_runs,
    automation_versions,
    automations,
    event_definitions,
)
from posthaste.storage.tables.broadcasts import (
    BROADCAST_COUNTS,
    broadcasts,
)
from posthaste.storage.tables.content import (
    template_versions,
    templates,
)
from posthaste.storage.tables.destinations import (
    destination_replies,
    destinations,
    pool_addresses,
)
from posthaste.storage.tables.domains import (
    delivery_attempts,
    domain_claims,
    domains,
)
from posthaste.storage.tables.inbound import (
    received_attachments,
    received_emails,
    received_recipients,
)
from posthaste.storage.tables.mta_sts import (
    mta_sts_policies,
    tls_report_counts,
    tls_reports,
)
from posthaste.storage.tables.sending import (
    api_keys,
    attachments,
    blobs,
    daily_usage,
    email_recipients,
    email_subjects,
    email_tags,
    emails,
    events,
    idempotency_keys,
    jobs,
    rate_limits,
    streams,
    suppressions,
    teams,
)
from posthaste.storage.tables.webhooks import (
    webhook_attempts,
    webhook_deliveries,
    webhooks,
)

__all__ = [
    "BROADCAST_COUNTS",
    "ID",
    "MS",
    "api_keys",
    "attachments",
    "automation_run_steps",
    "automation_runs",
    "automation_versions",
    "automations",
    "blobs",
    "broadcasts",
    "contact_import_parts",
    "contact_imports",
    "contact_topics",
    "contacts",
    "daily_usage",
    "delivery_attempts",
    "destination_replies",
    "destinations",
    "domain_claims",
    "domains",
    "email_recipients",
    "email_subjects",
    "email_tags",
    "emails",
    "event_definitions",
    "events",
    "idempotency_keys",
    "jobs",
    "metadata",
    "mta_sts_policies",
    "pool_addresses",
    "rate_limits",
    "received_attachments",
    "received_emails",
    "received_recipients",
    "segment_members",
    "segments",
    "streams",
    "suppressions",
    "teams",
    "template_versions",
    "templates",
    "tls_report_counts",
    "tls_reports",
    "topics",
    "webhook_attempts",
    "webhook_deliveries",
    "webhooks",
]
