"""A template create or update (``POST`` / ``PATCH /templates``) parsed once at the edge into
``NewTemplate`` or ``TemplateChanges``. Pure; whether an alias is taken is the service's to ask.

Decisions (docs/templates.md):

- ``name``: 1 to 200 characters, required on create.
- ``alias``: optional; lowercase letters, digits, ``-`` and ``_``, 1 to 64 characters (SPEC);
  not shaped like a UUID, so a reference is never both an id and an alias. ``null`` removes it.
- ``subject``: optional (a send then gives it); one header line of at most 2,000 characters.
- ``html`` / ``text``: at most 5 MiB of characters each, no NUL; at least one of them is kept.
- ``variables``: at most 100 ``{key, fallback_value?, type?}``; ``key`` is a placeholder path
  (``name``, ``order.total``), unique; ``fallback_value`` a string, number, boolean or null
  (null: no fallback); ``type`` (Resend's) ``string`` or ``number`` when given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Final, TypeVar

from posthaste.core.headers import validate_subject
from posthaste.core.ids import is_uuid
from posthaste.core.models import TemplateVariable, TemplateVersion
from posthaste.core.templates import is_variable_path
from posthaste.core.text import json_type, shorten
from posthaste.errors import ValidationError

MAX_NAME_LENGTH = 200
MAX_ALIAS_LENGTH = 64
MAX_BODY_LENGTH = 5 * 1024 * 1024
MAX_VARIABLES = 100
VARIABLE_TYPES = ("string", "number")
_ALIAS = re.compile(r"[a-z0-9_-]{1,64}")
_Value = TypeVar("_Value")


class Unchanged(Enum):
    """A field a ``PATCH`` body leaves out, told apart from one given as null."""

    UNCHANGED = "unchanged"


UNCHANGED: Final = Unchanged.UNCHANGED


@dataclass(frozen=True)
class NewTemplate:
    """``POST /templates``: every field checked, absent ones at their defaults, a body kept."""

    name: str
    alias: str | None = None
    subject: str | None = None
    html: str | None = None
    text: str | None = None
    variables: tuple[TemplateVariable, ...] = ()


@dataclass(frozen=True)
class TemplateChanges:
    """``PATCH /templates/{id}``: ``UNCHANGED`` where a field is absent. Null removes the alias,
    the subject or a body, and clears the variables."""

    name: str | Unchanged = UNCHANGED
    alias: str | Unchanged | None = UNCHANGED
    subject: str | Unchanged | None = UNCHANGED
    html: str | Unchanged | None = UNCHANGED
    text: str | Unchanged | None = UNCHANGED
    variables: tuple[TemplateVariable, ...] | Unchanged = UNCHANGED

    def content_of(self, draft: TemplateVersion) -> TemplateVersion:
        """``draft`` with the content changes applied (same id); it must keep a body."""
        edited = replace(
            draft,
            subject=_or(self.subject, draft.subject),
            html=_or(self.html, draft.html),
            text=_or(self.text, draft.text),
            variables=list(_or(self.variables, tuple(draft.variables))),
        )
        require_body(edited.html, edited.text)
        return edited


def parse_new_template(body: Mapping[str, object]) -> NewTemplate:
    """``POST /templates``'s body: ``name`` required, then each field as in a change."""
    if "name" not in body:
        raise ValidationError("'name' is required: 1-200 characters.")
    given = parse_template_changes(body)
    new = NewTemplate(
        _or(given.name, ""),
        _or(given.alias, None),
        _or(given.subject, None),
        _or(given.html, None),
        _or(given.text, None),
        _or(given.variables, ()),
    )
    require_body(new.html, new.text)
    return new


def parse_template_changes(body: Mapping[str, object]) -> TemplateChanges:
    """``PATCH /templates/{id}``'s body: the fields given, checked in the order of the record."""
    return TemplateChanges(
        _given(body, "name", validate_name),
        _given(body, "alias", validate_alias),
        _given(body, "subject", _subject),
        _given(body, "html", lambda value: _body(value, "html")),
        _given(body, "text", lambda value: _body(value, "text")),
        _given(body, "variables", lambda value: tuple(validate_variables(value))),
    )


def _given(
    body: Mapping[str, object], name: str, check: Callable[[object], _Value]
) -> _Value | Unchanged:
    return check(body[name]) if name in body else UNCHANGED


def _or(value: _Value | Unchanged, default: _Value) -> _Value:
    return default if value is UNCHANGED else value


def validate_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > MAX_NAME_LENGTH:
        raise ValidationError("'name' must be a string of 1-200 characters.")
    return value.strip()


def validate_alias(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _ALIAS.fullmatch(value):
        shown = shorten(value) if isinstance(value, str) else json_type(value)
        raise ValidationError(
            f"Invalid 'alias' {shown!r}: use 1-64 lowercase letters, digits, '-' and '_'."
        )
    if is_uuid(value):
        raise ValidationError("'alias' must not look like a template id (a UUID).")
    return value


def _subject(value: object) -> str | None:
    return None if value is None else validate_subject(value)


def _body(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"'{name}' must be a string, got {json_type(value)}.")
    if "\x00" in value:
        raise ValidationError(f"'{name}' must not contain NUL characters.")
    if len(value) > MAX_BODY_LENGTH:
        raise ValidationError(f"'{name}' is longer than {MAX_BODY_LENGTH} characters.")
    return value


def validate_variables(value: object) -> list[TemplateVariable]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError("'variables' must be an array of {key, fallback_value} objects.")
    if len(value) > MAX_VARIABLES:
        raise ValidationError(f"'variables' has {len(value)} entries; at most {MAX_VARIABLES}.")
    variables = [_variable(item, f"variables[{i}]") for i, item in enumerate(value)]
    keys = [v.key for v in variables]
    for key in keys:
        if keys.count(key) > 1:
            raise ValidationError(f"'variables' declares {key!r} more than once.")
    return variables


def _variable(item: object, where: str) -> TemplateVariable:
    if not isinstance(item, dict):
        raise ValidationError(f"'{where}' must be an object with 'key' and 'fallback_value'.")
    key = item.get("key")
    if not isinstance(key, str) or len(key) > 200 or not is_variable_path(key):
        raise ValidationError(
            f"'{where}.key' must name a placeholder: letters, digits, '_' and '-', "
            "dot-separated for nested data (e.g. 'order.total')."
        )
    fallback = item.get("fallback_value")
    if not (fallback is None or isinstance(fallback, str | int | float | bool)):
        raise ValidationError(
            f"'{where}.fallback_value' must be a string, number, boolean or null, "
            f"got {json_type(fallback)}."
        )
    kind = item.get("type")
    if kind is not None and kind not in VARIABLE_TYPES:
        raise ValidationError(f"'{where}.type' must be 'string' or 'number'.")
    return TemplateVariable(key, fallback, kind)


def require_body(html: str | None, text: str | None) -> None:
    """A template keeps at least one body."""
    if html is None and text is None:
        raise ValidationError("A template needs 'html' or 'text' (or both).")
