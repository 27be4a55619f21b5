"""Automations and their runs as stored, and the pure decisions a run's steps make: a
condition's outcome, a wait's due time, the values an email is rendered with.

A run follows one path through its automation's graph version (the version it started with),
one step at a time; ``current_step`` is the step its job executes next (None: the run ends).
While a ``wait_for_event`` step waits, ``waiting_for`` names the event; the event's arrival
clears it (and the step takes ``event_received``), its timeout takes ``timeout``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import orjson

from posthaste.core.addresses import Address
from posthaste.core.automation_configs import duration_seconds, parse_event_name
from posthaste.core.automations import AutomationStatus, Graph
from posthaste.core.contacts import Contact, parse_contact_email
from posthaste.core.ids import is_uuid
from posthaste.core.models import KeyMode
from posthaste.core.text import json_type
from posthaste.errors import ValidationError

MAX_PAYLOAD_BYTES = 64 * 1024


class RunStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepStatus(StrEnum):
    RUNNING = "running"  # started: a delay or a wait under way
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True)
class Automation:
    """An automation with its current graph version; ``mode`` is the mode of the key that
    created it (a test key's automation sends test mail)."""

    id: str
    team_id: str
    name: str
    status: AutomationStatus
    mode: KeyMode
    version_id: str
    graph: Graph
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class RunStep:
    run_id: str
    key: str
    type: str
    status: StepStatus
    started_at: int
    completed_at: int | None = None
    output: dict[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class Run:
    id: str
    team_id: str
    automation_id: str
    version_id: str
    contact_id: str
    status: RunStatus
    current_step: str | None
    event: dict[str, Any]  # the payload of the latest event the run saw
    waiting_for: str | None
    created_at: int
    completed_at: int | None = None
    steps: tuple[RunStep, ...] = field(default=())

    def step(self, key: str) -> RunStep | None:
        return next((s for s in self.steps if s.key == key), None)


def in_path_order(run: Run, graph: Graph) -> Run:
    """The run with its steps in the order it executed them: by start, and the steps one job
    executed in the same millisecond by their place in the graph."""
    placed = graph.positions()
    steps = sorted(run.steps, key=lambda s: (s.started_at, placed.get(s.key, len(placed))))
    return replace(run, steps=tuple(steps))


def due_after(step: RunStep, duration: str) -> int:
    """When a delay (or a wait's timeout) of ``duration`` started by ``step`` falls due."""
    return step.started_at + math.ceil(duration_seconds(duration, "duration") * 1000)


def contact_fields(contact: Contact) -> dict[str, Any]:
    """A contact as conditions and templates see it (``contact.<field>``)."""
    return {
        "id": contact.id,
        "email": contact.email,
        "first_name": contact.first_name,
        "last_name": contact.last_name,
        "unsubscribed": contact.unsubscribed,
        "properties": dict(contact.properties),
    }


def message_data(
    config_data: Mapping[str, Any], contact: Contact, event: Mapping[str, Any], *, templated: bool
) -> dict[str, Any]:
    """The values a send step renders with: its ``data``, ``contact`` and ``event``. A contact
    field without a value is left out for a template (its declared fallback applies) and is
    empty text for inline content (which has no fallbacks)."""
    fields = contact_fields(contact)
    for name in ("first_name", "last_name"):
        if fields[name] is None:
            if templated:
                del fields[name]
            else:
                fields[name] = ""
    return {**config_data, "contact": fields, "event": dict(event)}


def condition_met(config: Mapping[str, Any], contact: Contact, event: Mapping[str, Any]) -> bool:
    """A ``condition`` step's outcome over the contact's fields and the event's payload."""
    return _holds(config, {"contact": contact_fields(contact), "event": event})


def _holds(rule: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    kind = rule.get("type", "rule")
    if kind == "and":
        return all(_holds(r, context) for r in rule["rules"])
    if kind == "or":
        return any(_holds(r, context) for r in rule["rules"])
    actual = _value_at(context, rule["field"])
    name = rule["operator"]
    if name in ("exists", "is_empty"):
        present = actual is not None and actual != "" and actual != []
        return present if name == "exists" else not present
    expected = rule["value"]
    if name == "neq":
        return not _equal(actual, expected)
    if actual is None:
        return False
    return _COMPARE[name](actual, expected)


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(actual, list):
        return any(_equal(item, expected) for item in actual)
    return _text(expected) in _text(actual)


def _value_at(context: Mapping[str, Any], path: str) -> Any:
    value: Any = context
    for segment in path.split("."):
        if not isinstance(value, Mapping) or segment not in value:
            return None
        value = value[segment]
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _equal(actual: Any, expected: Any) -> bool:
    if actual is None:
        return False
    left, right = _number(actual), _number(expected)
    if left is not None and right is not None:
        return left == right
    return _text(actual) == _text(expected)


def _ordered(actual: Any, expected: Any) -> tuple[Any, Any]:
    """Numbers compare as numbers (``"42"`` is 42); anything else as text (ISO dates sort)."""
    left, right = _number(actual), _number(expected)
    if left is not None and right is not None:
        return left, right
    return _text(actual), _text(expected)


_COMPARE: Mapping[str, Callable[[Any, Any], bool]] = {
    "eq": _equal,
    "gt": lambda a, b: operator.gt(*_ordered(a, b)),
    "gte": lambda a, b: operator.ge(*_ordered(a, b)),
    "lt": lambda a, b: operator.lt(*_ordered(a, b)),
    "lte": lambda a, b: operator.le(*_ordered(a, b)),
    "contains": _contains,
    "starts_with": lambda a, b: _text(a).startswith(_text(b)),
    "ends_with": lambda a, b: _text(a).endswith(_text(b)),
}


@dataclass(frozen=True)
class CustomEvent:
    """``POST /events/send``: an event for one contact, named by id or by address."""

    name: str
    contact_id: str | None
    address: Address | None
    payload: dict[str, Any]


def parse_custom_event(body: Mapping[str, Any]) -> CustomEvent:
    name = parse_event_name(body.get("event"))
    contact_id, email = body.get("contact_id"), body.get("email")
    if (contact_id is None) == (email is None):
        raise ValidationError("Give exactly one of 'email' and 'contact_id'.")
    if contact_id is not None and (not isinstance(contact_id, str) or not is_uuid(contact_id)):
        raise ValidationError("'contact_id' must be the id of one of your contacts.")
    payload = body.get("payload") or {}
    if not isinstance(payload, dict):
        raise ValidationError(f"'payload' must be an object, got {json_type(payload)}.")
    if len(orjson.dumps(payload)) > MAX_PAYLOAD_BYTES:
        raise ValidationError("'payload' must be at most 64 KiB of JSON.")
    return CustomEvent(
        name=name,
        contact_id=None if contact_id is None else contact_id.lower(),
        address=None if email is None else parse_contact_email(email),
        payload=payload,
    )
