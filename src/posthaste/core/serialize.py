"""The public JSON shapes of domain records, shared by the API, webhooks and idempotent replays."""

from __future__ import annotations

from typing import Any, Protocol

from posthaste.core.attachment_links import LinkedAttachment
from posthaste.core.automation_runs import Automation, Run, RunStep
from posthaste.core.automations import graph_record
from posthaste.core.broadcasts import Broadcast
from posthaste.core.contact_imports import ContactImport
from posthaste.core.contacts import Contact
from posthaste.core.delivery import DeliveryAttempt
from posthaste.core.destinations import DestinationView
from posthaste.core.domains import Domain, tracking_subdomain
from posthaste.core.event_definitions import EventDefinition
from posthaste.core.ids import format_ms
from posthaste.core.inbound import ReceivedAttachment, ReceivedEmail
from posthaste.core.models import (
    ApiKey,
    AttachmentInfo,
    Email,
    Event,
    Stream,
    Suppression,
    Template,
    TemplateVariable,
)
from posthaste.core.pools import PoolView
from posthaste.core.segments import Segment
from posthaste.core.topics import ContactTopic, Topic


def email_record(email: Email) -> dict[str, Any]:
    return {
        "object": "email",
        "id": email.id,
        "from": email.from_address,
        "to": email.to,
        "cc": email.cc,
        "bcc": email.bcc,
        "reply_to": email.reply_to,
        "subject": email.subject,
        "html": email.html,
        "text": email.text,
        "headers": email.headers,
        "tags": email.tags,
        "status": email.status.value,
        "last_event": email.last_event,
        "created_at": format_ms(email.created_at),
        "scheduled_at": format_ms(email.scheduled_at),
        "sent_at": format_ms(email.sent_at),
        "template_id": email.template_id,
        "stream_id": email.stream_id,
        "broadcast_id": email.broadcast_id,
        "message_id": email.message_id,
        "provider_message_id": email.provider_message_id,
        "region": email.region,
        "origin": email.origin.value,
    }


class EmailFacts(Protocol):
    """What ``email_event_data`` reads: an ``Email`` or an ``EmailSummary``."""

    @property
    def id(self) -> str: ...
    @property
    def from_address(self) -> str: ...
    @property
    def to(self) -> list[str]: ...
    @property
    def subject(self) -> str: ...
    @property
    def created_at(self) -> int: ...
    @property
    def tags(self) -> dict[str, str]: ...
    @property
    def message_id(self) -> str: ...


def email_event_data(email: EmailFacts, **extra: Any) -> dict[str, Any]:
    """The ``data`` of an email event (PRODUCT §8); ``to`` may be narrowed to one recipient."""
    data: dict[str, Any] = {
        "email_id": email.id,
        "from": email.from_address,
        "to": email.to,
        "subject": email.subject,
        "created_at": format_ms(email.created_at),
        "tags": email.tags,
        "message_id": email.message_id,
    }
    data.update(extra)
    return data


def event_record(event: Event) -> dict[str, Any]:
    return {
        "object": "event",
        "id": event.id,
        "type": event.type,
        "created_at": format_ms(event.created_at),
        "data": event.data,
    }


def attachment_record(item: LinkedAttachment) -> dict[str, Any]:
    """SPEC's filename, content type and size; Resend's disposition and signed link beside."""
    info = item.info
    return {
        "object": "attachment",
        "id": info.id,
        "filename": info.filename,
        "content_type": info.content_type,
        "size": info.size,
        "content_id": info.content_id,
        "content_disposition": disposition(info),
        "download_url": item.download_url,
        "expires_at": format_ms(item.expires_at),
    }


def disposition(info: AttachmentInfo) -> str:
    """Inline when the html refers to it by Content-ID, else a regular attachment."""
    return "inline" if info.content_id else "attachment"


def received_email_record(
    item: ReceivedEmail, raw_link: tuple[str, int] | None = None
) -> dict[str, Any]:
    """A received email; with its ``raw_link`` (one email), Resend's ``raw`` and the html,
    text and headers; without (list pages, as Resend's) none of them."""
    record: dict[str, Any] = {
        "object": "received_email",
        "id": item.id,
        "from": item.from_address,
        "to": item.to,
        "cc": item.cc,
        "bcc": [],
        "reply_to": item.reply_to,
        "received_for": item.received_for,
        "subject": item.subject,
        "message_id": item.message_id,
        "created_at": format_ms(item.created_at),
        "size": item.size,
        "attachments": [received_attachment_record(a) for a in item.attachments],
        "authentication": item.authentication,
    }
    if raw_link is not None:
        url, expires_at = raw_link
        record.update(html=item.html, text=item.text, headers=item.headers)
        record["raw"] = {"download_url": url, "expires_at": format_ms(expires_at)}
    return record


def received_attachment_record(item: ReceivedAttachment) -> dict[str, Any]:
    return {
        "id": item.id,
        "filename": item.filename,
        "content_type": item.content_type,
        "size": item.size,
        "content_id": item.content_id,
        "content_disposition": item.disposition,
    }


def api_key_record(key: ApiKey) -> dict[str, Any]:
    """An API key as the API lists it: never its token or hash, only the hint."""
    return {
        "object": "api_key",
        "id": key.id,
        "name": key.name,
        "mode": key.mode.value,
        "permission": key.permission.value,
        "domain_id": key.domain_id,
        "token_hint": key.token_hint,
        "created_at": format_ms(key.created_at),
    }


def stream_record(stream: Stream) -> dict[str, Any]:
    return {
        "object": "stream",
        "id": stream.id,
        "name": stream.name,
        "type": stream.type,
        "created_at": format_ms(stream.created_at),
        "pool": stream.pool,
    }


def suppression_record(item: Suppression) -> dict[str, Any]:
    return {
        "object": "suppression",
        "id": item.id,
        "email": item.email,
        "origin": item.origin,
        "source_email_id": item.source_email_id,
        "created_at": format_ms(item.created_at),
    }


def template_record(template: Template) -> dict[str, Any]:
    """A template with its latest (draft) content; ``status`` says whether one is published."""
    draft = template.draft
    return {
        "object": "template",
        "id": template.id,
        "name": template.name,
        "alias": template.alias,
        "subject": draft.subject,
        "html": draft.html,
        "text": draft.text,
        "variables": [variable_record(v) for v in draft.variables],
        "status": template.status,
        "published_at": format_ms(template.published_at),
        "has_unpublished_changes": template.has_unpublished_changes,
        "created_at": format_ms(template.created_at),
        "updated_at": format_ms(template.updated_at),
    }


def variable_record(variable: TemplateVariable) -> dict[str, Any]:
    record: dict[str, Any] = {"key": variable.key, "fallback_value": variable.fallback_value}
    if variable.type is not None:
        record["type"] = variable.type
    return record


def domain_record(domain: Domain) -> dict[str, Any]:
    """A domain as the API shows it (never its private key)."""
    return {
        "object": "domain",
        "id": domain.id,
        "name": domain.name,
        "status": domain.status.value,
        "region": domain.region,
        "created_at": format_ms(domain.created_at),
        "records": [record.as_dict() for record in domain.records],
        "open_tracking": domain.open_tracking,
        "click_tracking": domain.click_tracking,
        "tls": domain.tls,
        "receiving": domain.receiving,
        "tracking_subdomain": tracking_subdomain(domain),
        "capabilities": {
            "sending": "enabled",
            "receiving": "enabled" if domain.receiving else "disabled",
        },
        "claimed": domain.claimed,
        "last_checked_at": format_ms(domain.last_checked_at),
        "pool": domain.pool,
    }


def attempt_record(item: DeliveryAttempt) -> dict[str, Any]:
    return {
        "object": "delivery_attempt",
        "id": item.id,
        "attempt": item.attempt,
        "attempted_at": format_ms(item.attempted_at),
        "transport": item.transport,
        "host": item.host,
        "recipients": item.recipients,
        "replies": item.replies,
        "transcript": item.transcript,
        "duration_ms": item.duration_ms,
    }


def destination_record(view: DestinationView) -> dict[str, Any]:
    return {
        "object": "destination",
        "name": view.name,
        "mx_hosts": view.mx_hosts,
        "state": view.state,
        "rate": round(view.rate, 3),
        "policy": {
            "max_connections": view.policy.max_connections,
            "messages_per_connection": view.policy.messages_per_connection,
            "rate": round(view.policy.rate, 3),
        },
        "suspended_until": format_ms(view.suspended_until),
        "recent": [
            {"at": format_ms(r.at), "reply": r.reply, "decision": r.decision} for r in view.recent
        ],
    }


def pool_record(view: PoolView) -> dict[str, Any]:
    return {
        "object": "pool",
        "name": view.name,
        "helo": view.helo,
        "warmup": {"per_day": list(view.per_day)},
        "addresses": [
            {
                "address": a.address,
                "warmup_day": a.warmup_day,
                "cap": a.cap,
                "sent_today": a.sent_today,
            }
            for a in view.addresses
        ],
    }


def contact_record(contact: Contact) -> dict[str, Any]:
    """A contact as the API shows it (and as ``contact.*`` events carry it)."""
    return {
        "object": "contact",
        "id": contact.id,
        "email": contact.email,
        "first_name": contact.first_name,
        "last_name": contact.last_name,
        "unsubscribed": contact.unsubscribed,
        "properties": contact.properties,
        "created_at": format_ms(contact.created_at),
        "updated_at": format_ms(contact.updated_at),
    }


def contact_import_record(item: ContactImport) -> dict[str, Any]:
    """An import with its counts (also under ``counts``, as Resend's SDKs read them) and its
    first line errors."""
    counts = {
        "total": item.total,
        "created": item.created,
        "updated": item.updated,
        "skipped": item.skipped,
        "failed": item.failed,
    }
    return {
        "object": "contact_import",
        "id": item.id,
        "status": item.status.value,
        "on_conflict": item.on_conflict.value,
        "segment_ids": list(item.segment_ids),
        **counts,
        "counts": counts,
        "errors": [{"line": e.line, "message": e.message} for e in item.errors],
        "created_at": format_ms(item.created_at),
        "completed_at": format_ms(item.completed_at),
    }


def segment_record(segment: Segment) -> dict[str, Any]:
    return {
        "object": "segment",
        "id": segment.id,
        "name": segment.name,
        "created_at": format_ms(segment.created_at),
    }


def topic_record(topic: Topic) -> dict[str, Any]:
    return {
        "object": "topic",
        "id": topic.id,
        "name": topic.name,
        "description": topic.description,
        "default_subscription": topic.default_subscription,
        "created_at": format_ms(topic.created_at),
        "updated_at": format_ms(topic.updated_at),
    }


def contact_topic_record(item: ContactTopic) -> dict[str, Any]:
    """A topic as one contact sees it: ``subscription`` is its effective subscription."""
    return {
        "id": item.topic.id,
        "name": item.topic.name,
        "description": item.topic.description,
        "subscription": item.subscription,
    }


def broadcast_record(item: Broadcast) -> dict[str, Any]:
    """A broadcast with its counts; Resend's ``audience_id`` mirrors ``segment_id``."""
    content = item.content
    return {
        "object": "broadcast",
        "id": item.id,
        "name": content.name,
        "segment_id": content.segment_id,
        "audience_id": content.segment_id,
        "topic_id": content.topic_id,
        "from": content.from_,
        "reply_to": content.reply_to,
        "subject": content.subject,
        "html": content.html,
        "text": content.text,
        "template": content.template,
        "data": content.data,
        "stream_id": content.stream_id,
        "preview_text": content.preview_text,
        "status": item.status.value,
        "error": item.error,
        "created_at": format_ms(item.created_at),
        "updated_at": format_ms(item.updated_at),
        "scheduled_at": format_ms(item.scheduled_at),
        "sent_at": format_ms(item.sent_at),
        "resumes_at": format_ms(item.resumes_at),
        **item.counts.as_dict(),
    }


def automation_record(automation: Automation) -> dict[str, Any]:
    return {
        "object": "automation",
        "id": automation.id,
        "name": automation.name,
        "status": automation.status.value,
        "created_at": format_ms(automation.created_at),
        "updated_at": format_ms(automation.updated_at),
        **graph_record(automation.graph),
    }


def run_record(run: Run, *, with_steps: bool = True) -> dict[str, Any]:
    """A run as the API shows it; in lists without its steps."""
    record: dict[str, Any] = {
        "object": "automation_run",
        "id": run.id,
        "automation_id": run.automation_id,
        "contact_id": run.contact_id,
        "status": run.status.value,
        "started_at": format_ms(run.created_at),
        "completed_at": format_ms(run.completed_at),
        "created_at": format_ms(run.created_at),
    }
    if with_steps:
        record["steps"] = [run_step_record(step) for step in run.steps]
    return record


def run_step_record(step: RunStep) -> dict[str, Any]:
    return {
        "key": step.key,
        "type": step.type,
        "status": step.status.value,
        "started_at": format_ms(step.started_at),
        "completed_at": format_ms(step.completed_at),
        "output": step.output,
        "error": step.error,
        "created_at": format_ms(step.started_at),
    }


def event_definition_record(definition: EventDefinition) -> dict[str, Any]:
    """A defined custom event (Resend's event object): its name and payload schema."""
    return {
        "object": "event",
        "id": definition.id,
        "name": definition.name,
        "schema": definition.schema,
        "created_at": format_ms(definition.created_at),
        "updated_at": format_ms(definition.updated_at),
    }
