"""Webhooks, pure parts: event types, secrets, Standard Webhooks signing, retry delays, records.

Signing follows the Standard Webhooks specification (https://www.standardwebhooks.com/): the
signed content is ``<webhook-id>.<webhook-timestamp>.<body>``, HMAC-SHA256 keyed with the
base64-decoded part of the secret after ``whsec_``, sent as ``v1,<base64>``. While a rotated-out
secret is still valid, both signatures are sent, space-separated, as the specification allows.
"""

from __future__ import annotations

import base64
import hmac
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from posthaste.core.events import EventType
from posthaste.core.ids import format_ms

EVENT_TYPES: tuple[str, ...] = tuple(EventType)
SECRET_PREFIX = "whsec_"
USER_AGENT = "Service-Webhooks/1.0"
RESPONSE_BODY_LIMIT = 1024
OLD_SECRET_GRACE_MS = 24 * 3600 * 1000


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True)
class Webhook:
    id: str
    team_id: str
    endpoint: str
    events: list[str]
    enabled: bool
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class WebhookDelivery:
    """One event as one endpoint sees it (``GET /webhooks/{id}/events``)."""

    event_id: str
    webhook_id: str
    type: str
    created_at: int
    data: dict[str, Any]
    status: DeliveryStatus
    attempts: int
    next_attempt_at: int | None


@dataclass(frozen=True)
class WebhookAttempt:
    id: str
    webhook_id: str
    event_id: str
    attempted_at: int
    status_code: int | None
    success: bool
    error: str | None
    duration_ms: int
    response_body: str | None


def new_secret() -> str:
    """``whsec_`` + 48 hex characters; the hex text itself is the base64 of a 36-byte key."""
    return SECRET_PREFIX + secrets.token_hex(24)


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret, exactly as Standard Webhooks libraries derive it."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(msg_id: str, timestamp: int, body: bytes, keys: Sequence[bytes]) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per key, space-separated."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.digest(key, content, "sha256")).decode() for key in keys
    )


def request_headers(msg_id: str, timestamp: int, signature: str) -> dict[str, str]:
    """Every header of a delivery: content type, user agent, Standard Webhooks and svix names."""
    stamp = str(timestamp)
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": stamp,
        "webhook-signature": signature,
        "svix-id": msg_id,
        "svix-timestamp": stamp,
        "svix-signature": signature,
    }


def envelope(event_type: str, created_at: int, data: dict[str, Any]) -> dict[str, Any]:
    """The body of a delivery and the ``data:`` of a stream event: ``{type, created_at, data}``."""
    return {"type": event_type, "created_at": format_ms(created_at), "data": data}


def envelope_bytes(event_type: str, created_at: int, data: dict[str, Any]) -> bytes:
    return orjson.dumps(envelope(event_type, created_at, data))


def retry_delay(
    attempts: int, schedule: Sequence[float], jitter: float, rng: random.Random | None = None
) -> float | None:
    """Seconds until the next attempt after ``attempts`` failures, or None: give up (failed).

    The first attempt is immediate; the n-th failure waits ``schedule[n-1]`` varied by up to
    ``jitter`` of itself either way, so retries of many events do not arrive in lockstep.
    """
    if attempts < 1 or attempts > len(schedule):
        return None
    base = schedule[attempts - 1]
    spread = (rng or random).uniform(-jitter, jitter) if jitter > 0 else 0.0
    return max(0.0, base * (1 + spread))


def webhook_record(hook: Webhook) -> dict[str, Any]:
    return {
        "object": "webhook",
        "id": hook.id,
        "endpoint": hook.endpoint,
        "events": hook.events,
        "enabled": hook.enabled,
        "status": "enabled" if hook.enabled else "disabled",
        "created_at": format_ms(hook.created_at),
        "updated_at": format_ms(hook.updated_at),
    }


def delivery_record(item: WebhookDelivery) -> dict[str, Any]:
    return {
        "object": "webhook_event",
        "id": item.event_id,
        "type": item.type,
        "payload": envelope(item.type, item.created_at, item.data),
        "created_at": format_ms(item.created_at),
        "status": item.status.value,
        "attempts": item.attempts,
        "next_attempt_at": format_ms(item.next_attempt_at),
    }


def attempt_record(item: WebhookAttempt) -> dict[str, Any]:
    return {
        "object": "webhook_attempt",
        "id": item.id,
        "attempted_at": format_ms(item.attempted_at),
        "status_code": item.status_code,
        "success": item.success,
        "error": item.error,
        "duration_ms": item.duration_ms,
        "response_body": item.response_body,
        # Resend's names for the same three
        "sent_at": format_ms(item.attempted_at),
        "http_status_code": item.status_code,
        "response": item.response_body,
    }
