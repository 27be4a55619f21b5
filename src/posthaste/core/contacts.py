"""Contacts as callers describe them (``POST`` / ``PATCH /contacts``), parsed once at the edge
(pure, no I/O); whether an address is taken or a segment exists is the service's to ask.

Decisions (docs/audiences.md):

- ``email``: one bare address (no display name); the domain is stored in its ASCII (A-label)
  form and the lower-cased address is the team-unique lookup key, so ``Ann@Example.COM`` and
  ``ann@example.com`` are one contact.
- ``first_name`` / ``last_name``: at most 200 characters, no control characters (CR, LF ...);
  null or absent is no name.
- ``unsubscribed``: a boolean, false on create unless given.
- ``properties``: a flat object of at most 50 keys; a key is 1-64 letters, digits, ``_`` or
  ``-`` starting with a letter or ``_``; a value is a string of at most 2,000 characters or a
  finite number (booleans, nulls, arrays and objects are refused, naming the key). On ``PATCH``
  the given keys are merged into the stored ones, a key given as null is removed, and
  ``properties: null`` removes them all.
- ``segments`` (create only): segment ids, each a string or Resend's ``{"id": ...}``.
- ``topics`` (create only): ``[{id, subscription: opt_in|opt_out}]``.
- Fields the body carries beside these (the Resend SDK sends ``id``, ``audience_id``) are ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from posthaste.core.addresses import Address, parse_address
from posthaste.core.ids import is_uuid
from posthaste.core.template_fields import UNCHANGED, Unchanged
from posthaste.core.text import json_type
from posthaste.core.topics import TopicChoice, parse_topic_choices
from posthaste.errors import ValidationError

MAX_NAME_LENGTH = 200
MAX_PROPERTIES = 50
MAX_PROPERTY_VALUE_LENGTH = 2000
MAX_SEGMENTS = 100
_PROPERTY_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")

PropertyValue = str | int | float
Properties = dict[str, PropertyValue]


@dataclass(frozen=True)
class Contact:
    """One contact of a team: ``email`` as stored (ASCII domain), ``email_key`` its lookup form."""

    id: str
    team_id: str
    email: str
    email_key: str
    first_name: str | None
    last_name: str | None
    unsubscribed: bool
    properties: Properties
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class NewContact:
    """``POST /contacts``: every field checked."""

    address: Address
    first_name: str | None = None
    last_name: str | None = None
    unsubscribed: bool = False
    properties: Properties = field(default_factory=dict)
    segment_ids: tuple[str, ...] = ()
    topics: tuple[TopicChoice, ...] = ()


@dataclass(frozen=True)
class ContactChanges:
    """``PATCH /contacts/{id_or_email}``: what the body gives; ``UNCHANGED`` for the rest.
    ``properties`` maps a key to its new value, or to None to remove it; ``clear_properties``
    drops every stored property first."""

    address: Address | Unchanged = UNCHANGED
    first_name: str | Unchanged | None = UNCHANGED
    last_name: str | Unchanged | None = UNCHANGED
    unsubscribed: bool | Unchanged = UNCHANGED
    properties: dict[str, PropertyValue | None] = field(default_factory=dict)
    clear_properties: bool = False

    def applied_to(self, contact: Contact, now: int) -> Contact:
        """The contact with these changes made (``updated_at`` moved only if one did)."""
        props: Properties = {} if self.clear_properties else dict(contact.properties)
        for key, value in self.properties.items():
            if value is None:
                props.pop(key, None)
            else:
                props[key] = value
        address = self.address
        changed = Contact(
            contact.id,
            contact.team_id,
            contact.email if isinstance(address, Unchanged) else address.address,
            contact.email_key if isinstance(address, Unchanged) else address.lookup_key,
            _kept(self.first_name, contact.first_name),
            _kept(self.last_name, contact.last_name),
            _kept(self.unsubscribed, contact.unsubscribed),
            props,
            contact.created_at,
            contact.updated_at,
        )
        if changed == contact:
            return contact
        return _with_updated_at(changed, now)


def _kept(value: Any, current: Any) -> Any:
    return current if isinstance(value, Unchanged) else value


def _with_updated_at(contact: Contact, now: int) -> Contact:
    values = {name: getattr(contact, name) for name in Contact.__dataclass_fields__}
    values["updated_at"] = max(now, contact.created_at)
    return Contact(**values)


def parse_contact_email(value: object) -> Address:
    """A contact's ``email``: one bare address."""
    if value is None:
        raise ValidationError("'email' is required: the contact's address.")
    address = parse_address(value, "email")  # type: ignore[arg-type]
    if address.name is not None or "<" in str(value):
        raise ValidationError("'email' must be a bare address, without a display name.")
    return address


def parse_new_contact(fields: Mapping[str, Any]) -> NewContact:
    """``POST /contacts``'s body."""
    return NewContact(
        address=parse_contact_email(fields.get("email")),
        first_name=parse_contact_name(fields.get("first_name"), "first_name"),
        last_name=parse_contact_name(fields.get("last_name"), "last_name"),
        unsubscribed=_parse_flag(fields.get("unsubscribed", False)),
        properties=_new_properties(fields.get("properties")),
        segment_ids=parse_segment_refs(fields.get("segments")),
        topics=tuple(parse_topic_choices(fields.get("topics"), "topics", required=False)),
    )


def parse_contact_changes(fields: Mapping[str, Any]) -> ContactChanges:
    """``PATCH /contacts/{id_or_email}``'s body."""
    values: dict[str, Any] = {}
    if "email" in fields:
        values["address"] = parse_contact_email(fields["email"])
    for name in ("first_name", "last_name"):
        if name in fields:
            values[name] = parse_contact_name(fields[name], name)
    if "unsubscribed" in fields:
        values["unsubscribed"] = _parse_flag(fields["unsubscribed"])
    if "properties" in fields:
        given = fields["properties"]
        if given is None:
            values["clear_properties"] = True
        else:
            values["properties"] = _changed_properties(given)
    return ContactChanges(**values)


def contact_ref_key(ref: str) -> tuple[str, str] | None:
    """What a ``{id_or_email}`` path names: ``("id", id)`` or ``("email", lookup key)``; None
    for text that is neither (so it names no contact)."""
    if is_uuid(ref):
        return ("id", ref.lower())
    try:
        return ("email", parse_address(ref, "email").lookup_key)
    except ValidationError:
        return None


def parse_segment_refs(value: object) -> tuple[str, ...]:
    """``segments`` on create: ids as strings or ``{"id": ...}`` objects, without repeats."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_SEGMENTS:
        raise ValidationError(f"'segments' must be an array of at most {MAX_SEGMENTS} segment ids.")
    ids: list[str] = []
    for index, item in enumerate(value):
        raw = item.get("id") if isinstance(item, dict) else item
        if not isinstance(raw, str) or not is_uuid(raw):
            raise ValidationError(f"'segments[{index}]' must be a segment id (or {{\"id\": ...}}).")
        if raw.lower() not in ids:
            ids.append(raw.lower())
    return tuple(ids)


def parse_contact_name(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{name!r} must be a string or null, got {json_type(value)}.")
    if len(value) > MAX_NAME_LENGTH or _CONTROL.search(value):
        raise ValidationError(
            f"{name!r} must be at most {MAX_NAME_LENGTH} characters, without control characters."
        )
    return value.strip() or None


def _parse_flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"'unsubscribed' must be true or false, got {json_type(value)}.")
    return value


def _new_properties(value: object) -> Properties:
    """A new contact's properties: a null value removes a key in a PATCH, so on create it has
    no meaning and is refused like any other value that is not a string or a number."""
    if value is None:
        return {}
    props: Properties = {}
    for key, item in _changed_properties(value).items():
        if item is None:
            raise ValidationError(f"'properties.{key}' must be a string or a number, got null.")
        props[key] = item
    return props


def _changed_properties(value: object) -> dict[str, PropertyValue | None]:
    if not isinstance(value, dict):
        raise ValidationError(f"'properties' must be an object, got {json_type(value)}.")
    if len(value) > MAX_PROPERTIES:
        raise ValidationError(f"'properties' may hold at most {MAX_PROPERTIES} keys.")
    return {property_key(key): property_value(key, item) for key, item in value.items()}


def property_key(key: str) -> str:
    if not _PROPERTY_KEY.fullmatch(key):
        shown = key if len(key) <= 80 else key[:80] + "..."
        raise ValidationError(
            f"Property key {shown!r} must be 1-64 letters, digits, '_' or '-', "
            "starting with a letter or '_'."
        )
    return key


def property_value(key: str, value: object) -> PropertyValue | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValidationError(
            f"'properties.{key}' must be a string or a number, got {json_type(value)}."
        )
    if isinstance(value, str) and len(value) > MAX_PROPERTY_VALUE_LENGTH:
        raise ValidationError(
            f"'properties.{key}' must be at most {MAX_PROPERTY_VALUE_LENGTH} characters."
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"'properties.{key}' must be a finite number.")
    return value
