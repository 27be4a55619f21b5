"""Sending domains without I/O: names, the DNS records to publish, and how checks move status.

- Names are normalised once (``parse_domain_name``): trimmed, one trailing dot dropped, IDN
  mapped to lowercase A-labels (UTS #46). IP addresses, single labels, labels over 63 octets,
  names over 253, and names that can only point at the machine itself or nowhere (``localhost``,
  ``.local``, ``.invalid``, ``.onion``, ``.arpa``) are refused, as ``core.addresses`` refuses them.
- The record set is fixed when the domain is created (PRODUCT §7). A TXT ``value`` is the whole
  text, as a DNS console wants it; ``zone_value`` is the same text as a zone file writes it, in
  quoted strings of at most 255 bytes each. Verification joins a TXT record's strings and
  compares the result exactly with ``value``.
- The domain is verified when DKIM and both SPF records match. A domain that was verified and
  loses a record is ``temporary_failure`` (still usable) and ``failed`` after ``GRACE_MS``; a
  domain that never verified is ``pending`` and ``failed`` after the same time.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import idna

from posthaste.core.text import json_type, shorten
from posthaste.errors import ValidationError

HOUR_MS = 3_600_000
GRACE_MS = 72 * HOUR_MS
DAILY_MS = 24 * HOUR_MS
RECORD_TTL = 3600
MX_PRIORITY = 10
TXT_STRING_BYTES = 255
SELECTOR_PREFIX = "ph"
REQUIRED = frozenset({"DKIM", "SPF"})
TLS_MODES = ("opportunistic", "enforced")
_REFUSED_SUFFIXES = ("localhost", "local", "invalid", "onion", "arpa")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")  # fullmatch: "$" would pass a newline


class RecordStatus(StrEnum):
    NOT_STARTED = "not_started"
    PENDING = "pending"
    VERIFIED = "verified"
    FAILED = "failed"
    TEMPORARY_FAILURE = "temporary_failure"


@dataclass(frozen=True)
class DnsRecord:
    """One record to publish: ``record`` is its role (DKIM, SPF, DMARC, Receiving, Tracking)."""

    record: str
    type: str
    name: str
    value: str
    ttl: int = RECORD_TTL
    priority: int | None = None
    status: RecordStatus = RecordStatus.NOT_STARTED

    @property
    def key(self) -> tuple[str, str]:
        """Where DNS is asked: (name, type)."""
        return (self.name, self.type)

    @property
    def required(self) -> bool:
        return self.record in REQUIRED

    @property
    def zone_value(self) -> str:
        """The record data as a zone file writes it (long TXT split in quoted strings)."""
        if self.type == "MX":
            return f"{self.priority} {self.value}."
        if self.type == "CNAME":
            return f"{self.value}."
        return " ".join(f'"{_zone_escape(part)}"' for part in split_txt(self.value))

    def as_dict(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "record": self.record,
            "type": self.type,
            "name": self.name,
            "value": self.value,
            "zone_value": self.zone_value,
            "ttl": self.ttl,
            "status": self.status.value,
        }
        if self.priority is not None:
            item["priority"] = self.priority
        return item

    @classmethod
    def from_dict(cls, item: dict[str, Any]) -> DnsRecord:
        return cls(
            record=item["record"],
            type=item["type"],
            name=item["name"],
            value=item["value"],
            ttl=int(item.get("ttl", RECORD_TTL)),
            priority=item.get("priority"),
            status=RecordStatus(item.get("status", RecordStatus.NOT_STARTED)),
        )


@dataclass(frozen=True)
class Domain:
    """A team's sending domain. ``verified_at`` is set while it counts as verified (ownership
    and sending); ``checking_since`` is when the current unverified or failing spell began."""

    id: str
    team_id: str
    name: str
    region: str
    status: RecordStatus
    records: tuple[DnsRecord, ...]
    dkim_selector: str
    key_provider: str
    open_tracking: bool
    click_tracking: bool
    tls: str
    receiving: bool
    created_at: int
    verified_at: int | None = None
    checking_since: int | None = None
    last_checked_at: int | None = None
    claim_token: str | None = None
    claimed: bool = False
    pool: str | None = None  # the IP pool its mail leaves from (core/pools.py); None: none

    @property
    def usable(self) -> bool:
        """Verified now, or verified and within the grace period of a lost record."""
        return self.verified_at is not None


@dataclass(frozen=True)
class DomainSettings:
    """The changeable settings of a domain (PATCH)."""

    open_tracking: bool = False
    click_tracking: bool = False
    tls: str = "opportunistic"
    receiving: bool = False
    tracking_subdomain: str | None = None  # links and pixels on <sub>.<domain> once verified


def parse_domain_name(value: object) -> str:
    """The lowercase A-label form of a domain name; ``ValidationError`` if it cannot send mail."""
    if not isinstance(value, str):
        raise ValidationError(f"'name' must be a domain name string, got {json_type(value)}.")
    text = value.strip()
    text = text[:-1] if text.endswith(".") else text
    if not text:
        raise ValidationError("'name' is required: give a domain name such as example.com.")
    shown = shorten(text)
    if _is_ip_address(text):
        raise ValidationError(f"'name' {shown!r} is an IP address; give a domain name.")
    ascii_name = _to_a_labels(text, shown)
    _check_labels(ascii_name, shown)
    return ascii_name


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def _to_a_labels(text: str, shown: str) -> str:
    if any(char.isspace() or ord(char) < 32 for char in text):
        raise ValidationError(f"'name' {shown!r} contains whitespace or control characters.")
    try:
        return idna.encode(text, uts46=True).decode("ascii").lower()
    except idna.IDNAError as exc:
        raise ValidationError(f"'name' {shown!r} is not a valid domain name ({exc}).") from None


def _check_labels(name: str, shown: str) -> None:
    labels = name.split(".")
    if len(labels) < 2:
        raise ValidationError(f"'name' {shown!r} has a single label; give a name like example.com.")
    if len(name) > 253:
        raise ValidationError(f"'name' {shown!r} is longer than 253 characters.")
    for label in labels:
        if len(label) > 63:
            raise ValidationError(f"'name' {shown!r} has a label longer than 63 characters.")
        if not _LABEL.fullmatch(label):
            raise ValidationError(
                f"'name' {shown!r} is not a valid domain name: labels hold letters, digits "
                "and inner hyphens."
            )
    if labels[-1].isdigit():
        raise ValidationError(f"'name' {shown!r} ends in a numeric label; give a domain name.")
    if labels[-1] in _REFUSED_SUFFIXES:
        raise ValidationError(
            f"'name' {shown!r} cannot receive mail from the internet (.{labels[-1]})."
        )


def new_selector() -> str:
    """A DKIM selector unique to one team's domain: ``ph`` and 10 random characters."""
    alphabet = string.ascii_lowercase + string.digits
    return SELECTOR_PREFIX + "".join(secrets.choice(alphabet) for _ in range(10))


def dkim_value(public_key_b64: str) -> str:
    return f"v=DKIM1; k=rsa; p={public_key_b64}"


def spf_value(spf_include: str) -> str:
    return f"v=spf1 include:{spf_include} ~all"


DMARC_VALUE = "v=DMARC1; p=none;"


def records_for(
    name: str,
    selector: str,
    public_key_b64: str,
    *,
    mx_host: str,
    spf_include: str,
    receiving: bool,
) -> tuple[DnsRecord, ...]:
    """The records a new domain publishes (PRODUCT §7), all ``not_started``."""
    records = [
        DnsRecord("DKIM", "TXT", f"{selector}._domainkey.{name}", dkim_value(public_key_b64)),
        DnsRecord("SPF", "MX", f"send.{name}", mx_host, priority=MX_PRIORITY),
        DnsRecord("SPF", "TXT", f"send.{name}", spf_value(spf_include)),
        DnsRecord("DMARC", "TXT", f"_dmarc.{name}", DMARC_VALUE),
    ]
    if receiving:
        records.append(receiving_record(name, mx_host))
    return tuple(records)


def receiving_record(name: str, mx_host: str) -> DnsRecord:
    return DnsRecord("Receiving", "MX", name, mx_host, priority=MX_PRIORITY)


def with_receiving(domain: Domain, receiving: bool, mx_host: str) -> tuple[DnsRecord, ...]:
    """The record set after turning receiving on or off."""
    kept = tuple(r for r in domain.records if r.record != "Receiving")
    return (*kept, receiving_record(domain.name, mx_host)) if receiving else kept


def tracking_record(name: str, subdomain: str, target: str) -> DnsRecord:
    """The CNAME that puts a domain's tracking links on ``<subdomain>.<name>``: it points at
    ``target``, the host of the service's public URL."""
    return DnsRecord("Tracking", "CNAME", f"{subdomain}.{name}", target)


def with_tracking(domain: Domain, subdomain: str | None, target: str) -> tuple[DnsRecord, ...]:
    """The record set after setting (or, with None, removing) the tracking subdomain."""
    kept = tuple(r for r in domain.records if r.record != "Tracking")
    if subdomain is None:
        return kept
    return (*kept, tracking_record(domain.name, subdomain, target))


def tracking_subdomain(domain: Domain) -> str | None:
    """The tracking subdomain the domain asked for (its CNAME verified or not)."""
    for record in domain.records:
        if record.record == "Tracking":
            return record.name.removesuffix("." + domain.name)
    return None


def tracking_host(domain: Domain) -> str | None:
    """The host the domain's tracking links use: its tracking subdomain once the CNAME is
    verified, else None (the service's public URL)."""
    for record in domain.records:
        if record.record == "Tracking" and record.status is RecordStatus.VERIFIED:
            return record.name
    return None


def split_txt(value: str) -> list[str]:
    """A TXT value as DNS stores it: character-strings of at most 255 bytes."""
    data = value.encode()
    return [
        data[i : i + TXT_STRING_BYTES].decode() for i in range(0, len(data), TXT_STRING_BYTES)
    ] or [""]


def _zone_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def record_matches(record: DnsRecord, found: Sequence[str]) -> bool:
    """Whether the values found at the record's name satisfy it.

    TXT: one record equal to ``value`` (strings joined), except DMARC, where any published
    ``v=DMARC1`` policy will do (it is advice). MX: one host equal to ``value`` (any priority).
    """
    if record.record == "DMARC":
        return any(item.replace(" ", "").lower().startswith("v=dmarc1") for item in found)
    if record.type in ("MX", "CNAME"):
        return record.value.lower().rstrip(".") in {item.lower().rstrip(".") for item in found}
    return record.value in found


def observe(record: DnsRecord, found: Sequence[str] | None, was_verified: bool) -> RecordStatus:
    """One record's status after a lookup; ``found`` is None when DNS gave no answer."""
    if found is None:
        return RecordStatus.TEMPORARY_FAILURE
    if record_matches(record, found):
        return RecordStatus.VERIFIED
    if was_verified and record.required:
        return RecordStatus.TEMPORARY_FAILURE
    return RecordStatus.PENDING


@dataclass(frozen=True)
class CheckResult:
    """The domain after one check: statuses and the two clocks that drive the 72 h rule."""

    status: RecordStatus
    records: tuple[DnsRecord, ...]
    verified_at: int | None
    checking_since: int | None


Lookups = Mapping[tuple[str, str], Sequence[str] | None]
"""What DNS answered per (name, type): the values, or None when it gave no answer."""


def apply_check(domain: Domain, found: Lookups, now: int) -> CheckResult:
    """Fold lookups into the domain's new state.

    A check of a verified, failed or never-checked domain that does not verify starts a new
    72 h window; checks during a window keep it (calling verify again does not extend it).
    """
    checking_since = domain.checking_since
    if checking_since is None or domain.status is RecordStatus.FAILED:
        checking_since = now
    records = tuple(
        replace(record, status=observe(record, found[record.key], domain.usable))
        if record.key in found
        else record  # added after the lookups began: checked next time
        for record in domain.records
    )
    required = [r.status for r in records if r.required]
    if all(status is RecordStatus.VERIFIED for status in required):
        return CheckResult(RecordStatus.VERIFIED, records, domain.verified_at or now, None)
    if now - checking_since >= GRACE_MS:
        return CheckResult(RecordStatus.FAILED, _failed(records), None, checking_since)
    if domain.usable or RecordStatus.TEMPORARY_FAILURE in required:
        status = RecordStatus.TEMPORARY_FAILURE
    else:
        status = RecordStatus.PENDING
    return CheckResult(status, records, domain.verified_at, checking_since)


def _failed(records: tuple[DnsRecord, ...]) -> tuple[DnsRecord, ...]:
    return tuple(
        replace(r, status=RecordStatus.FAILED)
        if r.required and r.status is not RecordStatus.VERIFIED
        else r
        for r in records
    )


def next_check_in(result: CheckResult, now: int) -> int | None:
    """Milliseconds until the worker checks again, or None (failed: only a manual verify)."""
    if result.status is RecordStatus.VERIFIED:
        return DAILY_MS
    if result.status is RecordStatus.FAILED or result.checking_since is None:
        return None
    elapsed = now - result.checking_since
    if elapsed < 10 * 60_000:
        delay = 60_000
    elif elapsed < HOUR_MS:
        delay = 5 * 60_000
    elif elapsed < 6 * HOUR_MS:
        delay = 15 * 60_000
    else:
        delay = HOUR_MS
    return max(60_000, min(delay, result.checking_since + GRACE_MS - now))


def settings_of(domain: Domain) -> DomainSettings:
    return DomainSettings(
        domain.open_tracking,
        domain.click_tracking,
        domain.tls,
        domain.receiving,
        tracking_subdomain(domain),
    )
