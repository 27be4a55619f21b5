"""Validating the fields of a template create or update (``POST`` / ``PATCH /templates``). Pure.

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
from collections.abc import Mapping
from typing import Any

from posthaste.core.headers import validate_subject
from posthaste.core.ids import is_uuid
from posthaste.core.models import TemplateVariable
from posthaste.core.templates import is_variable_path
from posthaste.core.text import json_type, shorten
from posthaste.errors import ValidationError

MAX_NAME_LENGTH = 200
MAX_ALIAS_LENGTH = 64
MAX_BODY_LENGTH = 5 * 1024 * 1024
MAX_VARIABLES = 100
VARIABLE_TYPES = ("string", "number")
CONTENT_FIELDS = ("subject", "html", "text", "variables")
_ALIAS = re.compile(r"[a-z0-9_-]{1,64}")

Changes = dict[str, Any]


def template_changes(body: Mapping[str, Any], *, creating: bool) -> Changes:
    """The validated fields present in ``body`` (all of them on create, with defaults)."""
    if creating and "name" not in body:
        raise ValidationError("'name' is required: 1-200 characters.")
    checks = {
        "name": validate_name,
        "alias": validate_alias,
        "subject": _subject,
        "html": lambda value: _body(value, "html"),
        "text": lambda value: _body(value, "text"),
        "variables": validate_variables,
    }
    changes: Changes = {}
    for name, check in checks.items():
        if name in body:
            changes[name] = check(body[name])
        elif creating:
            changes[name] = [] if name == "variables" else None
    return changes


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
