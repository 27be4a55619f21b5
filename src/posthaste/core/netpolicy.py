"""Which network addresses a webhook may reach (SSRF protection), and endpoint URL checks.

Pure: no lookups here. The service checks an endpoint's literal address, or its name and the
addresses the name resolves to, at create and PATCH; the webhook HTTP adapter checks the
addresses it is about to connect to at every delivery, after resolving (so a name that changes
its answer cannot sneak past). ``localhost`` and the names under it are loopback whatever DNS
says (RFC 6761 §6.3): refused without asking.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services beyond the link-local and private ranges already refused.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
MAX_ENDPOINT_LENGTH = 2048


@dataclass(frozen=True)
class Endpoint:
    """A parsed endpoint URL: its host (IDN as A-labels, no brackets) and its literal address."""

    url: str
    host: str
    address: IPAddress | None


def refusal_reason(address: str | IPAddress) -> str | None:
    """Why ``address`` may not be reached from the service, or None when it is public."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return refusal_reason(embedded)
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_private:
        return "a private address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved or not ip.is_global:
        return "a reserved or non-public address"
    return None


def endpoint_refusal(endpoint: Endpoint) -> str | None:
    """Why an endpoint may not be reached, known before any lookup: a literal address that is
    not public, or a loopback name; None when only the name's addresses can tell."""
    if endpoint.address is not None:
        reason = refusal_reason(endpoint.address)
        return None if reason is None else f"{endpoint.host} is {reason}"
    if endpoint.host == "localhost" or endpoint.host.endswith(".localhost"):
        return f"{endpoint.host} is a loopback name"
    return None


def resolved_refusal(host: str, addresses: Sequence[str]) -> str | None:
    """Why ``host`` may not be reached: the first of its addresses that is not public."""
    for address in addresses:
        reason = refusal_reason(address)
        if reason is not None:
            return f"{host} resolves to {address}, {reason}"
    return None


def parse_endpoint(value: object) -> Endpoint:
    """An absolute http(s) URL with a host; raises ValueError naming what is wrong."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("'endpoint' is required: an absolute http or https URL.")
    url = value.strip()
    if len(url) > MAX_ENDPOINT_LENGTH:
        raise ValueError(f"'endpoint' is longer than {MAX_ENDPOINT_LENGTH} characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(f"'endpoint' is not a valid URL: {url!r}.") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"'endpoint' must be an absolute http or https URL, got {url!r}.")
    if port == 0 or any(ch.isspace() for ch in url):
        raise ValueError(f"'endpoint' is not a valid URL: {url!r}.")
    host = _host(parts.hostname, url)
    try:
        address: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        address = _ipv4_shorthand(host)
    return Endpoint(url, host, address)


_NUMBER = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")


def _ipv4_shorthand(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a host written as numbers stands for (``0``, ``127.1``, ``0x7f.1``,
    ``2130706433``), as the WHATWG URL standard and ``inet_aton`` read it; None for a name.

    Browsers, curl and the system resolver take such a host for an address without asking DNS,
    so it is checked as the address it is. One that is not a valid address (``1.2.3.4.5``,
    ``09``) stays a name: its lookup's answers are checked like any name's.
    """
    numbers = [_ipv4_number(label) for label in host.split(".")]
    if len(numbers) > 4 or None in numbers:
        return None
    *leading, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in leading) or last >= 256 ** (4 - len(leading)):
        return None
    return ipaddress.IPv4Address(last + sum(n << 8 * (3 - i) for i, n in enumerate(leading)))


def _ipv4_number(label: str) -> int | None:
    """A label of a numeric host: decimal, hexadecimal after ``0x``, octal after a ``0``."""
    if _NUMBER.fullmatch(label) is None:
        return None
    if label[:2].lower() == "0x":
        return int(label[2:] or "0", 16)
    if len(label) > 1 and label.startswith("0"):
        return int(label, 8) if set(label) <= set("01234567") else None
    return int(label)


def _host(hostname: str, url: str) -> str:
    try:
        return hostname.rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError:
        if ":" in hostname:  # an IPv6 literal
            return hostname.lower()
        raise ValueError(f"'endpoint' has an invalid host name: {url!r}.") from None
