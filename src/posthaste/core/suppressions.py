"""Suppressions as callers give them, parsed once at the edge (pure, no I/O): the address to
suppress and the origin a listing is filtered on."""

from __future__ import annotations

from posthaste.core.addresses import Address, parse_address
from posthaste.errors import ValidationError

SUPPRESSION_ORIGINS = ("bounce", "complaint", "manual")
MAX_SUPPRESSIONS_PER_CALL = 1000


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


def parse_suppression_body(body: object) -> tuple[list[Address], bool]:
    """``POST /suppressions``: ``{email}`` (one), or a list: ``{emails: [...]}`` (Resend's
    batch form) or a JSON array of addresses or ``{email}`` objects. The addresses, and whether
    a list was given (it answers a list). Every entry is checked before anything is stored."""
    if isinstance(body, dict) and "email" in body and "emails" in body:
        raise ValidationError("Give 'email' or 'emails', not both.")
    if isinstance(body, dict) and "emails" not in body:
        return [parse_suppressed_address(body.get("email"))], False
    entries = body.get("emails") if isinstance(body, dict) else body
    where = "emails" if isinstance(body, dict) else ""
    return parse_suppressed_addresses(entries, where), True


def parse_suppressed_addresses(entries: object, where: str = "emails") -> list[Address]:
    """A list of addresses to suppress (strings, or ``{email}`` objects), 1 to 1,000."""
    if not isinstance(entries, list) or not entries:
        raise ValidationError(
            f"{_name(where, 'the body')} must be a non-empty list of addresses (or {{email}} "
            "objects)."
        )
    if len(entries) > MAX_SUPPRESSIONS_PER_CALL:
        raise ValidationError(
            f"At most {MAX_SUPPRESSIONS_PER_CALL} addresses per call; got {len(entries)}."
        )
    found = []
    for index, entry in enumerate(entries):
        value = entry.get("email") if isinstance(entry, dict) else entry
        if not isinstance(value, str):
            raise ValidationError(f"'{where}[{index}]' must be an address.")
        found.append(parse_address(value, f"{where}[{index}]"))
    return found


def _name(where: str, otherwise: str) -> str:
    return f"'{where}'" if where else otherwise


def parse_removal_refs(body: dict[str, object]) -> list[str]:
    """Resend's batch remove: ``{emails: [...]}`` or ``{ids: [...]}`` (not both), 1 to 1,000."""
    if ("emails" in body) == ("ids" in body):
        raise ValidationError("Give 'emails' or 'ids': the suppressions to remove.")
    emails, ids = body.get("emails"), body.get("ids")
    if "emails" in body:
        return [a.lookup_key for a in parse_suppressed_addresses(emails)]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise ValidationError("'ids' must be a non-empty list of suppression ids.")
    if len(ids) > MAX_SUPPRESSIONS_PER_CALL:
        raise ValidationError(f"At most {MAX_SUPPRESSIONS_PER_CALL} ids per call; got {len(ids)}.")
    return [str(i) for i in ids]
