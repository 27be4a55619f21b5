"""SMTP TLS reporting (RFC 8460): the ``_smtp._tls`` TXT record and the daily JSON report.

Pure. Each outbound TLS session to a domain's MX is counted (``TlsCount``) by day, policy
domain, policy and outcome; once a day is over, the counts of each domain that publishes a
``v=TLSRPTv1`` record become one report (``build_report``), sent to its ``rua`` addresses.
"""

from __future__ import annotations

import datetime
import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from posthaste.core.mta_sts import PolicyError

REPORT_MEDIA_TYPE = "application/tlsrpt+gzip"
DAY_MS = 86_400_000


class TlsResult(StrEnum):
    """A session's outcome: success, or RFC 8460's result types that Posthaste can observe."""

    SUCCESS = "success"
    STARTTLS_NOT_SUPPORTED = "starttls-not-supported"
    CERTIFICATE_HOST_MISMATCH = "certificate-host-mismatch"
    CERTIFICATE_EXPIRED = "certificate-expired"
    CERTIFICATE_NOT_TRUSTED = "certificate-not-trusted"
    VALIDATION_FAILURE = "validation-failure"
    STS_POLICY_FETCH_ERROR = "sts-policy-fetch-error"
    STS_POLICY_INVALID = "sts-policy-invalid"
    STS_WEBPKI_INVALID = "sts-webpki-invalid"


class PolicyType(StrEnum):
    STS = "sts"
    NO_POLICY_FOUND = "no-policy-found"


@dataclass(frozen=True)
class TlsCount:
    """Sessions of one day (``YYYY-MM-DD``, UTC) with one outcome, under one policy."""

    day: str
    policy_domain: str
    policy_type: PolicyType
    policy_id: str  # the TXT record's id ('' without a policy)
    result: TlsResult
    mx_host: str = ""  # '' when no MX was reached (a policy fetch failure)
    receiving_ip: str = ""
    sessions: int = 1
    policy_text: str = ""  # the policy file, for the report's policy-string
    sending_ip: str = ""  # the session's source address; '' when unknown, and for successes


@dataclass(frozen=True)
class ReportAddress:
    """One ``rua`` of a TLSRPT record: ``mailto:`` or ``https:``."""

    uri: str

    @property
    def scheme(self) -> str:
        return self.uri.partition(":")[0].lower()


def parse_tlsrpt(texts: Iterable[str]) -> list[ReportAddress] | None:
    """The ``rua`` addresses of the domain's ``v=TLSRPTv1`` record; None when it has none.
    Two records, or one without a usable ``rua``, is a PolicyError."""
    ours = [t for t in texts if t.strip().startswith("v=TLSRPTv1")]
    if not ours:
        return None
    if len(ours) > 1:
        raise PolicyError(f"{len(ours)} TLSRPT TXT records, expected one")
    fields: dict[str, str] = {}
    for part in ours[0].split(";"):
        key, _, value = part.strip().partition("=")
        if key.strip():
            fields.setdefault(key.strip(), value.strip())
    addresses = [
        ReportAddress(uri.strip())
        for uri in fields.get("rua", "").split(",")
        if uri.strip().lower().startswith(("mailto:", "https:"))
    ]
    if not addresses:
        raise PolicyError("TLSRPT TXT record has no mailto: or https: rua")
    return addresses


def day_of(ms: int) -> str:
    """The UTC day of an epoch-milliseconds time, ``YYYY-MM-DD``."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).date().isoformat()


def day_start_ms(day: str) -> int:
    start = datetime.datetime.fromisoformat(day).replace(tzinfo=datetime.UTC)
    return int(start.timestamp() * 1000)


def build_report(
    day: str,
    policy_domain: str,
    counts: Sequence[TlsCount],
    *,
    organization: str,
    contact: str,
) -> dict[str, Any]:
    """The RFC 8460 report of ``policy_domain`` for ``day``: one entry per policy."""
    by_policy: dict[tuple[PolicyType, str], list[TlsCount]] = {}
    for count in counts:
        by_policy.setdefault((count.policy_type, count.policy_id), []).append(count)
    return {
        "organization-name": organization,
        "date-range": {
            "start-datetime": f"{day}T00:00:00Z",
            "end-datetime": f"{day}T23:59:59Z",
        },
        "contact-info": contact,
        "report-id": f"{day}T00:00:00Z_{policy_domain}@{organization}",
        "policies": [
            _policy_entry(policy_domain, kind, group)
            for (kind, _), group in sorted(by_policy.items())
        ],
    }


def _policy_entry(domain: str, kind: PolicyType, counts: list[TlsCount]) -> dict[str, Any]:
    policy: dict[str, Any] = {"policy-type": str(kind), "policy-domain": domain}
    text = next((c.policy_text for c in counts if c.policy_text), "")
    if kind is PolicyType.STS and text:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        policy["policy-string"] = lines
        policy["mx-host"] = [
            line.partition(":")[2].strip() for line in lines if line.startswith("mx:")
        ]
    ok = sum(c.sessions for c in counts if c.result is TlsResult.SUCCESS)
    failed = [c for c in counts if c.result is not TlsResult.SUCCESS]
    entry: dict[str, Any] = {
        "policy": policy,
        "summary": {
            "total-successful-session-count": ok,
            "total-failure-session-count": sum(c.sessions for c in failed),
        },
    }
    if failed:
        entry["failure-details"] = [_failure(c) for c in failed]
    return entry


def _failure(count: TlsCount) -> dict[str, Any]:
    detail: dict[str, Any] = {"result-type": str(count.result)}
    if count.sending_ip:
        detail["sending-mta-ip"] = count.sending_ip
    if count.mx_host:
        detail["receiving-mx-hostname"] = count.mx_host
    if count.receiving_ip:
        detail["receiving-ip"] = count.receiving_ip
    detail["failed-session-count"] = count.sessions
    return detail


def gzip_report(report: dict[str, Any]) -> bytes:
    """The report as sent over https: JSON, gzipped (``application/tlsrpt+gzip``)."""
    body = json.dumps(report, separators=(",", ":"), sort_keys=True).encode()
    return gzip.compress(body, mtime=0)


@dataclass(frozen=True)
class TlsOutcome:
    """One TLS session with an MX host: how it went, where, and from which of our addresses
    (``sending_ip``: '' when not known)."""

    result: TlsResult
    mx_host: str
    receiving_ip: str = ""
    sending_ip: str = ""
