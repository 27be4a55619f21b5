"""Every event type Posthaste records, in one enum (PRODUCT §8).

An email's status changes are ``email.<status>`` (``core.status`` maps one to the other); the
rest are informational (``email.delivery_delayed``, ``email.opened`` …) or about other records.
The webhook API accepts exactly these names in an endpoint's ``events``.
"""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    EMAIL_QUEUED = "email.queued"
    EMAIL_SCHEDULED = "email.scheduled"
    EMAIL_SENDING = "email.sending"
    EMAIL_SENT = "email.sent"
    EMAIL_DELIVERED = "email.delivered"
    EMAIL_DELIVERY_DELAYED = "email.delivery_delayed"
    EMAIL_BOUNCED = "email.bounced"
    EMAIL_COMPLAINED = "email.complained"
    EMAIL_FAILED = "email.failed"
    EMAIL_CANCELED = "email.canceled"
    EMAIL_SUPPRESSED = "email.suppressed"
    EMAIL_OPENED = "email.opened"
    EMAIL_CLICKED = "email.clicked"
    EMAIL_RECEIVED = "email.received"
    CONTACT_CREATED = "contact.created"
    CONTACT_UPDATED = "contact.updated"
    CONTACT_DELETED = "contact.deleted"
    DOMAIN_CREATED = "domain.created"
    DOMAIN_UPDATED = "domain.updated"
    DOMAIN_DELETED = "domain.deleted"
    SUPPRESSION_ADDED = "suppression.added"
    SUPPRESSION_REMOVED = "suppression.removed"
    AUTOMATION_RUN_STARTED = "automation.run.started"
    AUTOMATION_RUN_COMPLETED = "automation.run.completed"
    AUTOMATION_RUN_FAILED = "automation.run.failed"
