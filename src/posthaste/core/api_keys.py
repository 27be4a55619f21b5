"""A new API key as a caller asks for it, parsed and checked once at the edge (pure, no I/O).

Whether ``domain_id`` names one of the team's own domains needs the database: ``services.api_keys``
checks that as it stores the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from posthaste.core.models import KeyMode, Permission
from posthaste.errors import ValidationError

MAX_NAME_LENGTH = 200
_Choice = TypeVar("_Choice", KeyMode, Permission)


@dataclass(frozen=True)
class NewApiKey:
    """What a key may do: its mode, its permission and, optionally, the one domain it sends from."""

    name: str
    mode: KeyMode = KeyMode.LIVE
    permission: Permission = Permission.FULL_ACCESS
    domain_id: str | None = None


def parse_new_api_key(fields: Mapping[str, object], caller_mode: KeyMode) -> NewApiKey:
    """``POST /api-keys``'s body. ``mode`` defaults to the calling key's, and a test-mode caller
    may create only test-mode keys (so a leaked test key cannot mint live ones)."""
    name = parse_key_name(fields)
    permission = _choice(fields.get("permission", "full_access"), Permission, "permission")
    given = fields.get("mode")  # left out or null: the caller's; not "" or false
    mode = caller_mode if given is None else _choice(given, KeyMode, "mode")
    if caller_mode is KeyMode.TEST and mode is KeyMode.LIVE:
        raise ValidationError("A test-mode key can create only test-mode keys.")
    domain_id = fields.get("domain_id")
    if domain_id is not None and not isinstance(domain_id, str):
        raise ValidationError("'domain_id' must be the id of one of this team's domains.")
    return NewApiKey(name, mode, permission, domain_id)


def parse_key_name(fields: Mapping[str, object]) -> str:
    """A key's ``name`` (create, and ``PATCH /api-keys/{id}``: the only field a key changes)."""
    name = fields.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise ValidationError("'name' is required: 1-200 characters.")
    return name.strip()


def _choice(value: object, enum: type[_Choice], name: str) -> _Choice:
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return enum(value)
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise ValidationError(f"'{name}' must be one of: {allowed}.") from None
