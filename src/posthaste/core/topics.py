"""Topics (subscription preferences) as callers describe them, and a contact's choices, parsed
once at the edge (pure, no I/O).

Decisions (docs/audiences.md):

- ``name``: 1-200 characters; ``description``: at most 2,000 characters, null or absent for none.
- ``default_subscription``: ``opt_in`` (every contact is subscribed until it opts out) or
  ``opt_out`` (no contact is subscribed until it opts in); set on create, never changed after
  (changing it would silently move every contact that never chose).
- A contact's choice is ``{id, subscription: opt_in|opt_out}``; its effective subscription to a
  topic is its own choice, else the topic's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posthaste.core.ids import is_uuid
from posthaste.core.template_fields import UNCHANGED, Unchanged
from posthaste.core.text import json_type
from posthaste.errors import ValidationError

SUBSCRIPTIONS = ("opt_in", "opt_out")
MAX_NAME_LENGTH = 200
MAX_DESCRIPTION_LENGTH = 2000
MAX_CHOICES = 100


@dataclass(frozen=True)
class Topic:
    id: str
    team_id: str
    name: str
    description: str | None
    default_subscription: str
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class NewTopic:
    name: str
    description: str | None
    default_subscription: str


@dataclass(frozen=True)
class TopicChanges:
    name: str | Unchanged = UNCHANGED
    description: str | Unchanged | None = UNCHANGED


@dataclass(frozen=True)
class TopicChoice:
    """A contact's own choice for one topic."""

    topic_id: str
    subscription: str


@dataclass(frozen=True)
class ContactTopic:
    """A topic as one contact sees it: the topic and the contact's effective subscription."""

    topic: Topic
    subscription: str


def effective_subscription(topic: Topic, chosen: str | None) -> str:
    return chosen if chosen is not None else topic.default_subscription


def parse_new_topic(fields: Mapping[str, Any]) -> NewTopic:
    """``POST /topics``'s body."""
    default = fields.get("default_subscription")
    if default not in SUBSCRIPTIONS:
        raise ValidationError("'default_subscription' is required: 'opt_in' or 'opt_out'.")
    return NewTopic(
        _parse_name(fields.get("name")),
        _parse_description(fields.get("description")),
        str(default),
    )


def parse_topic_changes(fields: Mapping[str, Any]) -> TopicChanges:
    """``PATCH /topics/{id}``'s body: ``name`` and ``description``."""
    if "default_subscription" in fields:
        raise ValidationError("'default_subscription' cannot be changed once a topic exists.")
    values: dict[str, Any] = {}
    if "name" in fields:
        values["name"] = _parse_name(fields["name"])
    if "description" in fields:
        values["description"] = _parse_description(fields["description"])
    return TopicChanges(**values)


def parse_topic_choices(value: object, field: str, *, required: bool = True) -> list[TopicChoice]:
    """``[{id, subscription}]``: a contact's choices, one per topic (the last one given wins)."""
    if value is None and not required:
        return []
    if not isinstance(value, list) or len(value) > MAX_CHOICES:
        raise ValidationError(
            f"{field!r} must be an array of at most {MAX_CHOICES} {{id, subscription}} objects."
        )
    chosen: dict[str, TopicChoice] = {}
    for index, item in enumerate(value):
        choice = _parse_choice(item, f"{field}[{index}]")
        chosen[choice.topic_id] = choice
    return list(chosen.values())


def _parse_choice(item: object, where: str) -> TopicChoice:
    if not isinstance(item, dict):
        raise ValidationError(f"{where!r} must be an object {{id, subscription}}.")
    topic_id = item.get("id")
    if not isinstance(topic_id, str) or not is_uuid(topic_id):
        raise ValidationError(f"'{where}.id' must be a topic id.")
    subscription = item.get("subscription")
    if subscription not in SUBSCRIPTIONS:
        raise ValidationError(f"'{where}.subscription' must be 'opt_in' or 'opt_out'.")
    return TopicChoice(topic_id.lower(), str(subscription))


def _parse_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
        raise ValidationError(f"'name' is required: 1-{MAX_NAME_LENGTH} characters.")
    return value.strip()


def _parse_description(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION_LENGTH:
        raise ValidationError(
            f"'description' must be a string of at most {MAX_DESCRIPTION_LENGTH} characters,"
            f" got {json_type(value)}."
        )
    return value.strip() or None
