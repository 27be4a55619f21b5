"""Webhook endpoints as callers describe them, parsed once at the edge (pure, no I/O).

Whether an endpoint leads to a public address needs DNS: ``services.webhooks`` checks that (and
the literal addresses and loopback names refused without asking) before it stores the endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from posthaste.core.netpolicy import Endpoint, parse_endpoint
from posthaste.core.webhooks import EVENT_TYPES
from posthaste.errors import ValidationError

_KNOWN_TYPES = frozenset(EVENT_TYPES)


@dataclass(frozen=True)
class NewWebhook:
    """``POST /webhooks``: where to post, which event types, and whether it starts enabled."""

    endpoint: Endpoint
    events: tuple[str, ...]
    enabled: bool = True


@dataclass(frozen=True)
class WebhookChanges:
    """``PATCH /webhooks/{id}``: None leaves a field as it is (null is refused for each)."""

    endpoint: Endpoint | None = None
    events: tuple[str, ...] | None = None
    enabled: bool | None = None


def parse_new_webhook(fields: Mapping[str, object]) -> NewWebhook:
    """``POST /webhooks``'s body, checked in the order ``endpoint``, ``events``, ``enabled``.

    Resend's ``status`` ("enabled" or "disabled") is accepted beside ``enabled``.
    """
    endpoint = _endpoint(fields.get("endpoint"))
    events = tuple(parse_event_types(fields.get("events"), "events"))
    enabled = _enabled_or_status(fields)
    return NewWebhook(endpoint, events, True if enabled is None else enabled)


def parse_webhook_changes(fields: Mapping[str, object]) -> WebhookChanges:
    """``PATCH /webhooks/{id}``'s body: only the fields given, each checked as on create."""
    endpoint = _endpoint(fields["endpoint"]) if "endpoint" in fields else None
    events = tuple(parse_event_types(fields["events"], "events")) if "events" in fields else None
    return WebhookChanges(endpoint, events, _enabled_or_status(fields))


def parse_event_types(value: object, name: str) -> list[str]:
    """A non-empty list of known event types, duplicates removed, order kept."""
    if not isinstance(value, list) or not value:
        raise ValidationError(f"'{name}' must be a non-empty array of event types.")
    unknown = [item for item in value if not isinstance(item, str) or item not in _KNOWN_TYPES]
    if unknown:
        raise ValidationError(
            f"'{name}' has unknown event types: {', '.join(map(str, unknown))}; "
            f"known types: {', '.join(EVENT_TYPES)}."
        )
    return list(dict.fromkeys(value))


def _endpoint(value: object) -> Endpoint:
    try:
        return parse_endpoint(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


_STATUSES = {"enabled": True, "disabled": False}


def _enabled_or_status(fields: Mapping[str, object]) -> bool | None:
    """``enabled`` (a boolean) or Resend's ``status``; both may be given only if they agree."""
    enabled = _enabled(fields["enabled"]) if "enabled" in fields else None
    if "status" not in fields:
        return enabled
    status = fields["status"]
    if not isinstance(status, str) or status not in _STATUSES:
        raise ValidationError('\'status\' must be "enabled" or "disabled".')
    if enabled is not None and enabled != _STATUSES[status]:
        raise ValidationError("'enabled' and 'status' disagree; give one of them.")
    return _STATUSES[status]


def _enabled(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationError("'enabled' must be true or false.")
    return value
