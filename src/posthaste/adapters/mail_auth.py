"""Checking a received message's authentication (RFC 8601 results), through our DNS resolver.

- DKIM: the first ``DKIM-Signature`` is verified with dkimpy; its key record is fetched here
  through ``POSTHASTE_DNS_NAMESERVERS`` (``adapters.dns.Resolver``) and handed to dkimpy, which
  runs in a thread (RSA and hashing a large body would hold the event loop). ``pass``, ``fail``
  (a signature that does not verify; also one whose tags or key record dkimpy cannot read:
  ``dkim.verify`` answers False for any of its errors, and a body-hash mismatch is one of them),
  ``permerror`` (a signature without ``d=`` or ``s=``), ``temperror`` (the key could not be
  fetched), ``none`` (not signed).
- DMARC: ``pass`` when the From domain publishes a DMARC record and the DKIM signature that
  passed is aligned with it (relaxed: same organisational domain, taken here as the last two
  labels); else ``none``. Deciding ``fail`` needs SPF as well.
- SPF: ``none``. No SPF library is installed (``pyspf`` and ``authheaders`` are candidates;
  docs/inbound.md says why neither ships yet); the result says that nothing was checked.
"""

from __future__ import annotations

import asyncio
import logging
import re
from email.parser import BytesHeaderParser
from email.policy import compat32

import dkim

from posthaste.adapters.dns import DnsTemporaryFailure, Resolver
from posthaste.core.inbound import Arrival, lookup_key
from posthaste.core.mail_auth import NONE, TEMPERROR, Authentication

log = logging.getLogger(__name__)

OFFLOAD_VERIFY_BYTES = 64 * 1024
_TAG = re.compile(r"(?:^|;)\s*([a-z]+)\s*=\s*([^;]*)")
_HEADERS = BytesHeaderParser(policy=compat32)


class MessageAuthenticator:
    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver

    async def authenticate(self, arrival: Arrival) -> Authentication:
        end = arrival.raw.find(b"\r\n\r\n")  # the header alone (a split copies the body)
        head = (arrival.raw if end < 0 else arrival.raw[:end]) + b"\r\n\r\n"
        headers = _HEADERS.parsebytes(head)
        from_domain = _from_domain(str(headers.get("from", "")))
        dkim_result, domain, selector = await self._dkim(
            arrival.raw, headers.get_all("dkim-signature")
        )
        dmarc = await self._dmarc(from_domain, domain) if dkim_result == "pass" else NONE
        return Authentication(
            spf=NONE,
            dkim=dkim_result,
            dmarc=dmarc,
            mail_from=arrival.mail_from,
            dkim_domain=domain,
            dkim_selector=selector,
            from_domain=from_domain,
        )

    async def _dkim(self, raw: bytes, signatures: list[str] | None) -> tuple[str, str, str]:
        if not signatures:
            return NONE, "", ""
        tags = dict(_TAG.findall(" ".join(str(signatures[0]).split())))
        domain, selector = tags.get("d", "").strip().lower(), tags.get("s", "").strip()
        if not domain or not selector:
            return "permerror", domain, selector
        try:
            records = await self.resolver.txt(f"{selector}._domainkey.{domain}")
        except DnsTemporaryFailure:
            return TEMPERROR, domain, selector
        key = records[0].encode() if records else None
        if len(raw) > OFFLOAD_VERIFY_BYTES:
            verdict = await asyncio.to_thread(_verify, raw, key)
        else:
            verdict = _verify(raw, key)
        return verdict, domain, selector

    async def _dmarc(self, from_domain: str, signer: str) -> str:
        if not from_domain or _organisational(signer) != _organisational(from_domain):
            return NONE
        for name in dict.fromkeys([from_domain, _organisational(from_domain)]):
            try:
                records = await self.resolver.txt(f"_dmarc.{name}")
            except DnsTemporaryFailure:
                return TEMPERROR
            if any(r.replace(" ", "").lower().startswith("v=dmarc1") for r in records):
                return "pass"
        return NONE


def _verify(raw: bytes, key: bytes | None) -> str:
    """dkimpy's verdict on the first signature, given the key record we fetched."""

    def dnsfunc(name: bytes | str, timeout: int = 5) -> bytes | None:
        return key

    try:
        return "pass" if dkim.verify(raw, dnsfunc=dnsfunc) else "fail"
    except dkim.DKIMException as exc:
        log.info("DKIM signature unreadable: %s", exc)
        return "permerror"


def _from_domain(value: str) -> str:
    address = lookup_key(value)
    return address.rpartition("@")[2] if "@" in address else ""


def _organisational(domain: str) -> str:
    return ".".join(domain.split(".")[-2:])
