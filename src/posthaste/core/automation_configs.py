"""Each automation step type's ``config``, checked at create and update (pure, no I/O).

- ``trigger``: ``{event}`` (Resend's ``event_name`` too): ``contact.created`` or a custom
  event name.
- ``send_email``: ``{from, template, subject?, data?, reply_to?, tags?}`` (``template`` may be
  Resend's ``{id, variables}``) or ``{from, subject, html and/or text, data?, reply_to?, tags?}``;
  the recipient is the run's contact. Checked as a send request would be.
- ``delay``: ``{duration}``: ``90s``, ``2h``, ``3d`` ... (more than 0, at most 365 days).
- ``wait_for_event``: ``{event, timeout?}`` (``event_name`` too): a custom event name and a
  duration as for ``delay`` (365 days when not given).
- ``condition``: a rule ``{field, operator, value}`` or ``{type: "and"|"or", rules: [...]}``:
  ``field`` is ``contact.<field>``, ``contact.properties.<key>`` or ``event.<path>``; ``operator``
  one of eq, neq, gt, gte, lt, lte, contains, starts_with, ends_with, exists, is_empty (the last
  two take no ``value``).
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
OPERATORS = (
    "eq", "neq", "gt", "gte", "lt", "lte", "contains", "starts_with", "ends_with", "exists",
    "is_empty",
)  # fmt: skip
VALUELESS = ("exists", "is_empty")
MAX_RULES = 20
DEFAULT_TIMEOUT = "365d"
CONTACT_FIELDS = ("id", "email", "first_name", "last_name", "unsubscribed")
_EVENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
# Our own event families: a custom event may not take their names.
RESERVED_PREFIXES = ("contact.", "email.", "domain.", "suppression.", "automation.")
_SEND_FIELDS = ("from", "template", "subject", "html", "text", "data", "reply_to", "tags")
CONTACT_UPDATE_FIELDS = ("first_name", "last_name", "unsubscribed", "properties")
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


def _event_of(config: Mapping[str, Any]) -> object:
    """``event``, or Resend's ``event_name``."""
    return config.get("event", config.get("event_name"))


def _trigger(config: Mapping[str, Any]) -> Config:
    event = _event_of(config)
    if event != CONTACT_CREATED:
        event = parse_event_name(event)
    return {"event": event}


def _send_email(config: Mapping[str, Any]) -> Config:
    given = {k: config[k] for k in _SEND_FIELDS if config.get(k) is not None}
    template = given.get("template")
    if isinstance(template, dict):  # Resend's {id, variables}
        given["template"] = template.get("id")
        variables = template.get("variables")
        if variables is not None:
            given["data"] = {**_object(variables, "template.variables"), **given.get("data", {})}
    if "data" in given:
        _object(given["data"], "data")
    parse_send_request({**given, "to": STAND_IN_RECIPIENT}, 0)
    return given


def _object(value: object, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"{name!r} must be an object, got {json_type(value)}.")
    return value


def _delay(config: Mapping[str, Any]) -> Config:
    duration_seconds(config.get("duration"), "duration")
    return {"duration": config["duration"]}


def _wait_for_event(config: Mapping[str, Any]) -> Config:
    if config.get("filter_rule") is not None:
        raise ValidationError("'filter_rule' is not supported; follow the wait with a condition.")
    timeout = config.get("timeout", DEFAULT_TIMEOUT)
    duration_seconds(timeout, "timeout")
    return {"event": parse_event_name(_event_of(config)), "timeout": timeout}


def _condition(config: Mapping[str, Any], depth: int = 0) -> Config:
    kind = config.get("type", "rule")
    if kind in ("and", "or"):
        rules = config.get("rules")
        if not isinstance(rules, list) or not rules or len(rules) > MAX_RULES or depth > 2:
            raise ValidationError(
                f"'rules' of an {kind!r} condition must be 1-{MAX_RULES} rules, nested at most "
                "3 deep."
            )
        return {
            "type": kind,
            "rules": [_condition(_object(r, "rules[]"), depth + 1) for r in rules],
        }
    if kind != "rule":
        raise ValidationError("A condition's 'type' must be 'rule', 'and' or 'or'.")
    return _rule(config)


def _rule(config: Mapping[str, Any]) -> Config:
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
    if operator not in VALUELESS:
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
    given = {k: config[k] for k in CONTACT_UPDATE_FIELDS if k in config}
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
