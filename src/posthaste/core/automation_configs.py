"""Each automation step type's ``config``, checked at create and update (pure, no I/O).

- ``trigger``: ``{event}``: ``contact.created`` or a custom event name.
- ``send_email``: ``{from, template, subject?, data?, reply_to?, tags?}`` or
  ``{from, subject, html and/or text, data?, reply_to?, tags?}``; the recipient is the run's
  contact. Checked as a send request would be.
- ``delay``: ``{duration}``: ``90s``, ``2h``, ``3d`` ... (more than 0, at most 365 days).
- ``wait_for_event``: ``{event, timeout}``: a custom event name and a duration as for ``delay``.
- ``condition``: ``{field, operator, value}``: ``field`` is ``contact.<field>``,
  ``contact.properties.<key>`` or ``event.<path>``; ``operator`` one of eq, neq, gt, lt,
  contains, exists (``value`` is not needed for exists).
- ``contact_update``: ``{first_name?, last_name?, unsubscribed?, properties?}`` as ``PATCH
  /contacts`` takes them.
- ``contact_delete``: ``{}``.
- ``add_to_segment`` / ``remove_from_segment``: ``{segment_id}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from posthaste.core.contacts import parse_contact_changes
from posthaste.core.durations import parse_duration
from posthaste.core.ids import is_uuid
from posthaste.core.send_request import parse_send_request
from posthaste.core.text import json_type
from posthaste.errors import ValidationError

CONTACT_CREATED = "contact.created"
MAX_WAIT_SECONDS = 365 * 86_400
OPERATORS = ("eq", "neq", "gt", "lt", "contains", "exists")
CONTACT_FIELDS = ("id", "email", "first_name", "last_name", "unsubscribed")
_EVENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
# Our own event families: a custom event may not take their names.
RESERVED_PREFIXES = ("contact.", "email.", "domain.", "suppression.", "automation.")
_SEND_FIELDS = ("from", "template", "subject", "html", "text", "data", "reply_to", "tags")
_CONTACT_UPDATE_FIELDS = ("first_name", "last_name", "unsubscribed", "properties")
_FIELD = re.compile(r"(contact\.properties\.[A-Za-z_][A-Za-z0-9_-]*|event(\.[A-Za-z0-9_-]+)+)")
STAND_IN_RECIPIENT = "contact@example.com"

Config = dict[str, Any]


def config_error(key: str, step_type: str, error: ValidationError) -> ValidationError:
    """A config problem, naming the step it belongs to."""
    return ValidationError(f"Step {key!r} ({step_type}): {error.message}")


def check_config(step_type: str, config: Mapping[str, Any]) -> Config:
    """The step's config as stored: checked, with only the fields its type reads."""
    return _CHECKS[step_type](config)


def parse_event_name(value: object, name: str = "event") -> str:
    """A custom event's name: 1-100 letters, digits, ``_ . : -``, not one of ours."""
    if not isinstance(value, str) or not _EVENT_NAME.fullmatch(value):
        raise ValidationError(
            f"{name!r} must be an event name: 1-100 letters, digits, '_', '.', ':' or '-'."
        )
    if value.lower().startswith(RESERVED_PREFIXES):
        raise ValidationError(
            f"{name!r} {value!r} is reserved for Posthaste's own events; choose another name."
        )
    return value


def duration_seconds(value: object, name: str) -> float:
    """A delay or timeout: more than 0 and at most 365 days."""
    if not isinstance(value, str):
        raise ValidationError(f"{name!r} must be a duration such as '90s', '2h' or '3d'.")
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise ValidationError(f"{name!r}: {exc}.") from None
    if not 0 < seconds <= MAX_WAIT_SECONDS:
        raise ValidationError(f"{name!r} must be more than 0 and at most 365 days.")
    return seconds


def _trigger(config: Mapping[str, Any]) -> Config:
    event = config.get("event")
    if event != CONTACT_CREATED:
        event = parse_event_name(event)
    return {"event": event}


def _send_email(config: Mapping[str, Any]) -> Config:
    given = {k: config[k] for k in _SEND_FIELDS if config.get(k) is not None}
    if "data" in given and not isinstance(given["data"], dict):
        raise ValidationError(f"'data' must be an object, got {json_type(given['data'])}.")
    parse_send_request({**given, "to": STAND_IN_RECIPIENT}, 0)
    return given


def _delay(config: Mapping[str, Any]) -> Config:
    duration_seconds(config.get("duration"), "duration")
    return {"duration": config["duration"]}


def _wait_for_event(config: Mapping[str, Any]) -> Config:
    duration_seconds(config.get("timeout"), "timeout")
    return {"event": parse_event_name(config.get("event")), "timeout": config["timeout"]}


def _condition(config: Mapping[str, Any]) -> Config:
    field = config.get("field")
    if not isinstance(field, str) or not _known_field(field):
        raise ValidationError(
            "'field' must name contact.<field> (id, email, first_name, last_name, "
            "unsubscribed), contact.properties.<key> or event.<path>."
        )
    operator = config.get("operator")
    if operator not in OPERATORS:
        raise ValidationError(f"'operator' must be one of: {', '.join(OPERATORS)}.")
    checked: Config = {"field": field, "operator": operator}
    if operator != "exists":
        value = config.get("value")
        if isinstance(value, (dict, list)) or value is None:
            raise ValidationError(
                f"'value' must be a string, a number or a boolean for {operator!r}."
            )
        checked["value"] = value
    return checked


def _known_field(field: str) -> bool:
    if field.startswith("contact.") and field.removeprefix("contact.") in CONTACT_FIELDS:
        return True
    return _FIELD.fullmatch(field) is not None


def _contact_update(config: Mapping[str, Any]) -> Config:
    if "email" in config:
        raise ValidationError("'email' cannot be changed by an automation.")
    given = {k: config[k] for k in _CONTACT_UPDATE_FIELDS if k in config}
    if not given:
        raise ValidationError(
            "Give at least one of 'first_name', 'last_name', 'unsubscribed', 'properties'."
        )
    parse_contact_changes(given)
    return given


def _contact_delete(config: Mapping[str, Any]) -> Config:
    return {}


def _segment(config: Mapping[str, Any]) -> Config:
    segment_id = config.get("segment_id")
    if not isinstance(segment_id, str) or not is_uuid(segment_id):
        raise ValidationError("'segment_id' must be the id of one of your segments.")
    return {"segment_id": segment_id.lower()}


_CHECKS: Mapping[str, Callable[[Mapping[str, Any]], Config]] = {
    "trigger": _trigger,
    "send_email": _send_email,
    "delay": _delay,
    "wait_for_event": _wait_for_event,
    "condition": _condition,
    "contact_update": _contact_update,
    "contact_delete": _contact_delete,
    "add_to_segment": _segment,
    "remove_from_segment": _segment,
}
