"""Suppressions as callers give them, parsed once at the edge (pure, no I/O): the address to
suppress and the origin a listing is filtered on."""

from __future__ import annotations

from posthaste.core.addresses import Address, parse_address
from posthaste.errors import ValidationError

SUPPRESSION_ORIGINS = ("bounce", "complaint", "manual")


def parse_suppressed_address(value: object) -> Address:
    """``POST /suppressions``'s ``email``: one address; its ``lookup_key`` is what is stored."""
    if not isinstance(value, str):
        raise ValidationError("'email' is required: the address to suppress.")
    return parse_address(value, "email")


def parse_suppression_origin(value: str | None) -> str | None:
    """The ``origin`` filter of ``GET /suppressions``: one of the origins, or None for all."""
    if value is not None and value not in SUPPRESSION_ORIGINS:
        raise ValidationError("'origin' must be one of bounce, complaint, manual.")
    return value
