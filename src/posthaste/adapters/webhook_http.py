"""Outbound webhook requests with aiohttp: one session, keep-alive, no redirects, SSRF-guarded.

Names are resolved by ``GuardedResolver`` (through ``POSTHASTE_DNS_NAMESERVERS`` when set, else
the system resolver) and every address is checked *before* aiohttp connects to it: the checked
address is the one connected to, so a name cannot answer differently a second time (no DNS
rebinding). Literal IP endpoints and ``localhost`` names are checked here too, without a lookup.
aiohttp's errors are translated into ``HttpResult.error`` text, once, here.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from posthaste.adapters.dns import DnsTemporaryFailure, Resolver
from posthaste.core.netpolicy import endpoint_refusal, parse_endpoint, resolved_refusal
from posthaste.core.webhooks import RESPONSE_BODY_LIMIT

# getaddrinfo's answers for a name that does not exist or has no address (not "try again").
_NO_SUCH_NAME = frozenset(
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)
)


class RefusedAddress(OSError):
    """The endpoint resolves to an address the service must not reach."""


@dataclass(frozen=True)
class HttpResult:
    status_code: int | None
    success: bool
    error: str | None
    duration_ms: int
    response_body: str | None


class HostLookup:
    """A name's addresses, through the configured nameservers or else the system resolver."""

    def __init__(self, nameservers: tuple[tuple[str, int], ...]) -> None:
        self._dns = Resolver(nameservers) if nameservers else None

    async def addresses(self, host: str) -> list[str]:
        """Every address of ``host``, ``[]`` when it has none (no such name, or no A or AAAA
        record); OSError when it cannot be resolved now (timeout, SERVFAIL, no server)."""
        if self._dns is not None:
            try:
                return await self._dns.addresses(host)
            except DnsTemporaryFailure as exc:
                raise OSError(str(exc)) from exc
        system = DefaultResolver()
        try:
            found = await system.resolve(host, 0, socket.AF_UNSPEC)
        except socket.gaierror as exc:
            if exc.errno in _NO_SUCH_NAME:
                return []
            raise
        finally:
            await system.close()
        return list(dict.fromkeys(item["host"] for item in found))


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver: our lookup, refusing non-public addresses unless allowed."""

    def __init__(self, lookup: HostLookup, *, allow_private: bool) -> None:
        self._lookup = lookup
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self._lookup.addresses(host)
        if not addresses:
            raise OSError(f"{host} does not resolve to any address")
        refusal = None if self._allow_private else resolved_refusal(host, addresses)
        if refusal is not None:
            raise RefusedAddress(f"refused: {refusal}")
        return [_result(host, address, port) for address in addresses]

    async def close(self) -> None:
        return None


def _result(host: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(
        hostname=host, host=address, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST
    )


class WebhookClient:
    """POSTs deliveries; ``limit`` bounds the connections of the whole process."""

    def __init__(
        self, lookup: HostLookup, *, timeout: float, allow_private: bool, limit: int = 1024
    ) -> None:
        self._lookup = lookup
        self._timeout = timeout
        self._allow_private = allow_private
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None
        # Per endpoint URL, parsed once: the URL object and the literal-address refusal.
        self._endpoints: dict[str, tuple[URL, str | None]] = {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limit,
                limit_per_host=0,  # per-endpoint bounds are the dispatcher's claims
                resolver=GuardedResolver(self._lookup, allow_private=self._allow_private),
                ttl_dns_cache=10,
                enable_cleanup_closed=False,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding",),
            )
        return self._session

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> HttpResult:
        """One attempt: 2xx is success; anything else, a redirect included, is a failure."""
        started = time.monotonic()
        try:
            parsed, refused = self._endpoints[url]
        except KeyError:
            if len(self._endpoints) > 4096:
                self._endpoints.clear()
            try:
                parsed, refused = URL(url), self._refused_literal(url)
            except ValueError as exc:
                return _failure(f"request failed: invalid URL: {exc}", started)
            self._endpoints[url] = parsed, refused
        if refused is not None:
            return _failure(refused, started)
        try:
            return await self._send(parsed, body, headers, started)
        except TimeoutError:
            return _failure(f"timed out after {self._timeout:g}s", started)
        except aiohttp.ClientConnectorDNSError as exc:
            return _failure(_dns_error(exc), started)
        except aiohttp.ClientConnectorError as exc:
            return _failure(f"connection failed: {exc.os_error or exc}", started)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return _failure(f"request failed: {exc.__class__.__name__}: {exc}", started)

    async def _send(
        self, url: URL, body: bytes, headers: dict[str, str], started: float
    ) -> HttpResult:
        async with self._client().post(
            url, data=body, headers=headers, allow_redirects=False
        ) as response:
            head = await response.content.read(RESPONSE_BODY_LIMIT)
            if not response.content.at_eof():
                response.close()  # a long answer is not worth keeping the connection for
            status = response.status
            text = head.decode("utf-8", "replace")
            location = response.headers.get("Location")
        success = 200 <= status < 300
        error = None if success else _status_error(status, location)
        return HttpResult(status, success, error, _elapsed(started), text)

    def _refused_literal(self, url: str) -> str | None:
        """A literal address or a loopback name, refused without a lookup."""
        if self._allow_private:
            return None
        try:
            endpoint = parse_endpoint(url)
        except ValueError as exc:
            return str(exc)
        refusal = endpoint_refusal(endpoint)
        return None if refusal is None else f"refused: {refusal}"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _status_error(status: int, location: str | None) -> str:
    if 300 <= status < 400:
        where = f" to {location}" if location else ""
        return f"HTTP {status}: redirect{where} not followed; answer 2xx at the endpoint itself"
    return f"HTTP {status}: only a 2xx answer counts as delivered"


def _dns_error(exc: aiohttp.ClientConnectorDNSError) -> str:
    cause = exc.os_error
    if isinstance(cause, RefusedAddress):
        return str(cause)
    return f"DNS lookup failed: {cause}"


def _elapsed(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _failure(error: str, started: float) -> HttpResult:
    return HttpResult(None, False, error, _elapsed(started), None)
