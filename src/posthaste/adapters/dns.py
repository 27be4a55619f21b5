"""DNS lookups through ``POSTHASTE_DNS_NAMESERVERS`` (or the system resolver), with dnspython.

Every lookup of the service (domain verification, claims, MX routing, webhook host checks) goes
through one ``Resolver``. UDP first, TCP when an answer is truncated (dnspython does the
fallback). dnspython's exceptions are translated here, once:

- a name or record type that does not exist is an ordinary answer (empty list, or ``None`` for
  a name that does not exist where the caller must tell the two apart);
- a timeout, SERVFAIL or no reachable server is ``DnsTemporaryFailure``: the caller decides
  whether to retry, never a 500.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver
from publicsuffixlist import PublicSuffixList

CACHE_SIZE = 10_000  # answers kept by a cached resolver


class DnsTemporaryFailure(Exception):
    """No usable answer now (timeout, SERVFAIL, no server reachable); worth retrying later."""


@dataclass(frozen=True, order=True)
class MxHost:
    """One MX record; ``host`` is ``""`` for a null MX (RFC 7505: the domain takes no mail)."""

    preference: int
    host: str


class Resolver:
    """Asynchronous lookups against the configured nameservers (``(ip, port)`` pairs)."""

    def __init__(
        self,
        nameservers: Sequence[tuple[str, int]] = (),
        *,
        timeout: float = 5.0,
        cached: bool = False,
    ):
        if nameservers:
            resolver = dns.asyncresolver.Resolver(configure=False)
            resolver.nameservers = [
                dns.nameserver.Do53Nameserver(host, port) for host, port in nameservers
            ]
        else:
            resolver = dns.asyncresolver.Resolver()
        resolver.lifetime = timeout
        resolver.timeout = min(timeout, 2.0)
        # Answers kept for their TTL when ``cached`` (MX routing: one lookup per destination and
        # TTL rather than three per message, a quarter of a worker's time in bench.throttle);
        # checks that must see a record just published (domain verification) ask afresh.
        # Bounded (least recently used out): received mail names any domain and selector it
        # likes. Failures (timeouts, SERVFAIL) are never kept; "no such name" is, for the
        # negative TTL its zone gives.
        resolver.cache = dns.resolver.LRUCache(CACHE_SIZE) if cached else None
        self._resolver = resolver

    async def _answer(self, name: str, rdtype: str) -> dns.resolver.Answer | None:
        """The answer, or None when the name or the type does not exist."""
        try:
            return await self._resolver.resolve(name, rdtype, search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return None
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
            raise DnsTemporaryFailure(f"DNS lookup of {rdtype} {name} failed: {exc}") from exc
        except dns.exception.DNSException as exc:
            raise DnsTemporaryFailure(f"DNS lookup of {rdtype} {name} failed: {exc}") from exc

    async def exists(self, name: str) -> bool:
        """False only for NXDOMAIN (the name has no records of any type)."""
        try:
            await self._resolver.resolve(name, "SOA", search=False)
        except dns.resolver.NXDOMAIN:
            return False
        except dns.resolver.NoAnswer:
            return True
        except dns.exception.DNSException as exc:
            raise DnsTemporaryFailure(f"DNS lookup of {name} failed: {exc}") from exc
        return True

    async def txt(self, name: str) -> list[str]:
        """Each TXT record as one string: its character-strings joined, as SPF and DKIM read it."""
        answer = await self._answer(name, "TXT")
        if answer is None:
            return []
        return [b"".join(rdata.strings).decode("utf-8", "replace") for rdata in answer]

    async def cname(self, name: str) -> list[str]:
        """The target of the CNAME at ``name``, lower-cased, without the final dot; ``[]`` when
        there is none."""
        answer = await self._answer(name, "CNAME")
        if answer is None:
            return []
        return [rdata.target.to_text(omit_final_dot=True).lower() for rdata in answer]

    async def mx(self, name: str) -> list[MxHost] | None:
        """MX records in preference order; ``[]`` when there are none, None for NXDOMAIN."""
        try:
            answer = await self._resolver.resolve(name, "MX", search=False)
        except dns.resolver.NoAnswer:
            return []
        except dns.resolver.NXDOMAIN:
            return None
        except dns.exception.DNSException as exc:
            raise DnsTemporaryFailure(f"DNS lookup of MX {name} failed: {exc}") from exc
        hosts = [
            MxHost(
                int(rdata.preference),
                rdata.exchange.to_text(omit_final_dot=True).lower(),
            )
            for rdata in answer
        ]
        return sorted(MxHost(h.preference, "" if h.host in ("", ".") else h.host) for h in hosts)

    async def addresses(self, name: str) -> list[str]:
        """The IPv4 and IPv6 addresses of ``name`` (A first, then AAAA)."""
        found: list[str] = []
        for rdtype in ("A", "AAAA"):
            answer = await self._answer(name, rdtype)
            if answer is not None:
                found.extend(rdata.to_text() for rdata in answer)
        return found


@functools.cache
def _suffixes() -> PublicSuffixList:
    return PublicSuffixList()  # the bundled list: no network


@functools.lru_cache(maxsize=4096)
def registered_domain(host: str) -> str:
    """The domain a host name was registered under (``gmail-smtp-in.l.google.com`` →
    ``google.com``), by the public suffix list and its default rule; the host itself when it
    is a suffix or a single label."""
    name = host.lower().rstrip(".")
    return _suffixes().privatesuffix(name) or name
