"""Sending domains as callers ask for them, parsed once at the edge (pure, no I/O).

Whether the team already has the name is the service's to ask; the regions a domain may use
are configuration, handed in by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from posthaste.core.domains import TLS_MODES, DomainSettings, parse_domain_name
from posthaste.core.pools import PoolChange, parse_pool_field
from posthaste.core.text import json_type
from posthaste.errors import ValidationError

SETTING_FIELDS = frozenset(
    {
        "open_tracking",
        "click_tracking",
        "tls",
        "receiving",
        "capabilities",
        "tracking_subdomain",
        "pool",
    }
)
REMOVED = ""  # DomainChanges.tracking_subdomain: null was given, the subdomain goes
_SUBDOMAIN = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")  # one DNS label (fullmatch)
CAPABILITY_STATES = {"enabled": True, "disabled": False}


@dataclass(frozen=True)
class NewDomain:
    """``POST /domains``: the normalised name, its region, its settings and its IP pool (None:
    none; whether it is configured is the service's to check)."""

    name: str
    region: str
    settings: DomainSettings
    pool: str | None = None


@dataclass(frozen=True)
class DomainChanges:
    """``PATCH /domains/{id}``: None leaves a setting as it is (null is refused for each)."""

    open_tracking: bool | None = None
    click_tracking: bool | None = None
    tls: str | None = None
    receiving: bool | None = None
    tracking_subdomain: str | None = None  # REMOVED ("") when null was given
    # The IP pool: its name, or null for none; checked by the service.
    pool: PoolChange | None = None

    def applied_to(self, current: DomainSettings) -> DomainSettings:
        """``current`` with the settings given here."""
        subdomain = current.tracking_subdomain
        if self.tracking_subdomain is not None:
            subdomain = self.tracking_subdomain or None
        return DomainSettings(
            current.open_tracking if self.open_tracking is None else self.open_tracking,
            current.click_tracking if self.click_tracking is None else self.click_tracking,
            current.tls if self.tls is None else self.tls,
            current.receiving if self.receiving is None else self.receiving,
            subdomain,
        )


def parse_new_domain(fields: Mapping[str, object], regions: Sequence[str]) -> NewDomain:
    """``POST /domains``'s body, checked in the order ``name``, ``region``, settings, pool."""
    name = parse_domain_name(fields.get("name"))
    region = parse_region(fields.get("region"), regions)
    settings = parse_settings(fields, DomainSettings())
    pool = parse_pool_field(fields)
    return NewDomain(name, region, settings, None if pool is None else pool.name)


def parse_domain_changes(fields: Mapping[str, object]) -> DomainChanges:
    """``PATCH /domains/{id}``'s body: at least one setting, each checked as on create."""
    if not fields.keys() & SETTING_FIELDS:
        raise ValidationError(
            "Give at least one of open_tracking, click_tracking, tls, receiving, pool, "
            "tracking_subdomain (or Resend's capabilities) to change."
        )
    return replace(_given_settings(fields), pool=parse_pool_field(fields))


def parse_region(value: object, regions: Sequence[str]) -> str:
    """The requested region, or the default (the first listed) when none is given."""
    if value is None:
        return regions[0]
    if not isinstance(value, str) or value not in regions:
        raise ValidationError(
            f"'region' must be one of: {', '.join(regions)} (see GET /domains/regions)."
        )
    return value


def parse_settings(fields: Mapping[str, object], current: DomainSettings) -> DomainSettings:
    """Apply the settings given in a create or PATCH body to ``current``."""
    return _given_settings(fields).applied_to(current)


def _given_settings(fields: Mapping[str, object]) -> DomainChanges:
    """The settings present in ``fields``, checked in the order the API always has."""
    open_tracking = _flag(fields, "open_tracking")
    click_tracking = _flag(fields, "click_tracking")
    receiving = _flag(fields, "receiving")
    from_capabilities = _receiving_capability(fields)
    if receiving is None:
        receiving = from_capabilities
    elif from_capabilities is not None and from_capabilities != receiving:
        raise ValidationError("'receiving' and 'capabilities.receiving' disagree; give one.")
    return DomainChanges(
        open_tracking, click_tracking, _tls(fields), receiving, _tracking_subdomain(fields)
    )


def _tracking_subdomain(fields: Mapping[str, object]) -> str | None:
    """One DNS label (``links``), lower-cased; null removes it (REMOVED); absent: None."""
    if "tracking_subdomain" not in fields:
        return None
    value = fields["tracking_subdomain"]
    if value is None:
        return REMOVED
    if not isinstance(value, str) or not _SUBDOMAIN.fullmatch(value.lower()):
        raise ValidationError(
            "'tracking_subdomain' must be one DNS label such as 'links' (letters, digits and "
            f"hyphens, at most 63, not starting or ending with a hyphen) or null, got {value!r}."
            if isinstance(value, str)
            else f"'tracking_subdomain' must be a string or null, got {json_type(value)}."
        )
    return value.lower()


def _receiving_capability(fields: Mapping[str, object]) -> bool | None:
    """Resend's ``capabilities: {sending, receiving}`` (each enabled|disabled) as ``receiving``.

    Every domain sends, so ``sending`` may only be ``enabled``.
    """
    if "capabilities" not in fields:
        return None
    value = fields["capabilities"]
    if not isinstance(value, Mapping):
        raise ValidationError(f"'capabilities' must be an object, got {json_type(value)}.")
    states = " or ".join(CAPABILITY_STATES)
    sending = value.get("sending", "enabled")
    if sending != "enabled":
        raise ValidationError("'capabilities.sending' can only be 'enabled': every domain sends.")
    if "receiving" not in value:
        return None
    receiving = value["receiving"]
    if not isinstance(receiving, str) or receiving not in CAPABILITY_STATES:
        raise ValidationError(f"'capabilities.receiving' must be {states}.")
    return CAPABILITY_STATES[receiving]


def _flag(fields: Mapping[str, object], name: str) -> bool | None:
    if name not in fields:
        return None
    value = fields[name]
    if not isinstance(value, bool):
        raise ValidationError(f"'{name}' must be true or false, got {json_type(value)}.")
    return value


def _tls(fields: Mapping[str, object]) -> str | None:
    if "tls" not in fields:
        return None
    value = fields["tls"]
    if not isinstance(value, str) or value not in TLS_MODES:
        raise ValidationError(f"'tls' must be one of: {', '.join(TLS_MODES)}.")
    return value
