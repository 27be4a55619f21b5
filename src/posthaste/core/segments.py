"""Segments (named lists of contacts, managed by adding and removing them), parsed once at the
edge (pure, no I/O). A segment's ``name`` is 1-200 characters and need not be unique."""

from __future__ import annotations

from dataclasses import dataclass

from posthaste.errors import ValidationError

MAX_NAME_LENGTH = 200


@dataclass(frozen=True)
class Segment:
    id: str
    team_id: str
    name: str
    created_at: int


def parse_segment_name(value: object) -> str:
    """``POST /segments``' and ``PATCH /segments/{id}``'s ``name``, trimmed."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
        raise ValidationError(f"'name' is required: 1-{MAX_NAME_LENGTH} characters.")
    return value.strip()
