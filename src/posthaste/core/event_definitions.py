"""Event definitions (Resend's ``/events``): a custom event's name declared with an optional
schema of its payload's fields, parsed once at the edge (pure, no I/O).

Decisions (docs/automations.md):

- ``name``: a custom event's name, as ``POST /events/send`` takes it; unique per team; fixed
  once created (only the schema changes). ``send`` and ``stream`` are refused: they are paths of
  the API under ``/events/``, so an event with that name could not be read back by name.
- ``schema``: ``null`` or a flat object of at most 100 fields, each ``string``, ``number``,
  ``boolean`` or ``date``.
- A payload sent for a defined event with a schema: each field the schema names must have that
  type when the payload carries it (a field left out, or ``null``, is not checked); fields the
  schema does not name pass. A ``date`` is an ISO 8601 date (``2026-11-27``) or date and time
  (``2026-11-27T10:00:00Z``). An event that is not defined, or defined without a schema, takes
  any payload.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from posthaste.core.automation_configs import parse_event_name
from posthaste.core.text import json_type, shorten
from posthaste.errors import ValidationError

FIELD_TYPES = ("string", "number", "boolean", "date")
MAX_FIELDS = 100
MAX_FIELD_NAME = 100
PATH_NAMES = frozenset({"send", "stream"})  # /events/send, /events/stream
_FIELD_NAME = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_FIELD_NAME}}}")

Schema = dict[str, str]


@dataclass(frozen=True)
class EventDefinition:
    id: str
    team_id: str
    name: str
    schema: Schema | None
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class NewEventDefinition:
    name: str
    schema: Schema | None


def parse_new_event_definition(fields: Mapping[str, Any]) -> NewEventDefinition:
    """``POST /events``'s body: ``{name, schema?}``."""
    name = parse_event_name(fields.get("name"), "name")
    if name.lower() in PATH_NAMES:
        raise ValidationError(
            f"'name' {name!r} cannot be defined: /events/{name} is a path of the API; "
            "choose another name."
        )
    return NewEventDefinition(name, parse_schema(fields.get("schema")))


def parse_schema_change(fields: Mapping[str, Any]) -> Schema | None:
    """``PATCH /events/{id_or_name}``'s body: ``{schema}`` (``null`` clears it)."""
    if "name" in fields:
        raise ValidationError("An event's 'name' cannot be changed; only its 'schema' can.")
    if "schema" not in fields:
        raise ValidationError(
            "'schema' is required: an object of field types, or null to clear it."
        )
    return parse_schema(fields["schema"])


def parse_schema(value: object) -> Schema | None:
    """``null``, or a flat object of field name → ``string|number|boolean|date``."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError(
            f"'schema' must be an object of field types (or null), got {json_type(value)}."
        )
    if len(value) > MAX_FIELDS:
        raise ValidationError(f"'schema' must have at most {MAX_FIELDS} fields.")
    for field, kind in value.items():
        if not _FIELD_NAME.fullmatch(field):
            raise ValidationError(
                f"'schema' field names must be 1-{MAX_FIELD_NAME} characters without control "
                "characters."
            )
        if kind not in FIELD_TYPES:
            raise ValidationError(
                f"'schema.{field}' must be one of {', '.join(map(repr, FIELD_TYPES))}; "
                "the schema is flat (no nested objects)."
            )
    return dict(value)


def check_payload(definition: EventDefinition, payload: Mapping[str, Any]) -> None:
    """Raise a 422 naming the first field of ``payload`` whose type the definition's schema
    contradicts (fields left out or null are not checked; unnamed fields pass)."""
    for field, kind in (definition.schema or {}).items():
        value = payload.get(field)
        if value is not None and not _has_type(value, kind):
            raise ValidationError(
                f"'payload.{field}' must be a {kind}{_DATE_HINT if kind == 'date' else ''}, "
                f"got {_described(value)}: the event {definition.name!r} is defined with a "
                f"schema (GET /events/{definition.name})."
            )


_DATE_HINT = " (ISO 8601, such as 2026-11-27 or 2026-11-27T10:00:00Z)"


def _described(value: object) -> str:
    if isinstance(value, str):
        return repr(shorten(value))
    return json_type(value)


def _has_type(value: object, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return isinstance(value, str) and _is_date(value)


def _is_date(value: str) -> bool:
    try:
        if len(value) == 10:
            date.fromisoformat(value)
        else:
            datetime.fromisoformat(value)
    except ValueError:
        return False
    return True
