"""HTTPS for MTA-STS and TLS reporting: fetching a domain's policy file, posting a report.

Names are resolved through ``POSTHASTE_DNS_NAMESERVERS`` (else the system resolver) by the
webhooks' ``GuardedResolver``, which refuses loopback, private and link-local addresses unless
``POSTHASTE_MTA_STS_ALLOW_PRIVATE`` is set. Certificates are verified against
``POSTHASTE_TLS_CA_FILE`` when set, else the system's CAs. A policy fetch follows no redirect,
reads at most 64 KiB and wants ``text/plain`` (RFC 8461 §3.3); every failure is a
``PolicyFetchError`` whose ``result`` is the RFC 8460 result type to report.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from posthaste.adapters.webhook_http import GuardedResolver, HostLookup, RefusedAddress
from posthaste.core.mta_sts import POLICY_SIZE_LIMIT
from posthaste.core.tls_reports import REPORT_MEDIA_TYPE, TlsResult


class PolicyFetchError(Exception):
    """The policy could not be had; ``result`` says how for the TLS reports."""

    def __init__(self, message: str, result: TlsResult = TlsResult.STS_POLICY_FETCH_ERROR):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class PostResult:
    """One report delivery over https: ``ok``, else why not."""

    ok: bool
    detail: str


def verified_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verifying certificates against ``ca_file``, else the system's CAs."""
    if ca_file is None:
        return _system_context()
    return ssl.create_default_context(cafile=str(ca_file))


@functools.cache
def _system_context() -> ssl.SSLContext:
    """Made once per process, as ``smtp_client.default_tls_context``: loading the system's CA
    bundle costs 50-100 ms of CPU, and every ``build_services`` makes a ``PolicyFetcher``."""
    return ssl.create_default_context()


class PolicyFetcher:
    """``https://mta-sts.<domain>/.well-known/mta-sts.txt`` with aiohttp; ``port`` lets tests
    serve it elsewhere than 443."""

    def __init__(
        self,
        nameservers: tuple[tuple[str, int], ...],
        *,
        ca_file: Path | None = None,
        allow_private: bool = False,
        timeout: float = 20.0,
        port: int = 443,
    ) -> None:
        self._resolver = GuardedResolver(HostLookup(nameservers), allow_private=allow_private)
        self._context = verified_context(ca_file)
        self._timeout = timeout
        self._port = port

    def url_of(self, domain: str) -> str:
        port = "" if self._port == 443 else f":{self._port}"
        return f"https://mta-sts.{domain}{port}/.well-known/mta-sts.txt"

    async def fetch(self, domain: str) -> str:
        """The policy file's text; PolicyFetchError saying what went wrong."""
        url = self.url_of(domain)
        try:
            async with (
                self._session() as session,
                session.get(url, allow_redirects=False) as response,
            ):
                _check_response(url, response.status, response.content_type)
                body = await response.content.read(POLICY_SIZE_LIMIT + 1)
        except PolicyFetchError:
            raise
        except aiohttp.ClientConnectorCertificateError as exc:
            raise PolicyFetchError(
                f"{url}: certificate not valid: {exc.certificate_error}",
                TlsResult.STS_WEBPKI_INVALID,
            ) from exc
        except aiohttp.ClientConnectorDNSError as exc:
            cause = exc.os_error
            reason = str(cause) if isinstance(cause, RefusedAddress) else f"DNS: {cause}"
            raise PolicyFetchError(f"{url}: {reason}") from exc
        except TimeoutError as exc:
            raise PolicyFetchError(f"{url}: timed out after {self._timeout:g}s") from exc
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise PolicyFetchError(f"{url}: {exc.__class__.__name__}: {exc}") from exc
        if len(body) > POLICY_SIZE_LIMIT:
            raise PolicyFetchError(f"{url}: larger than {POLICY_SIZE_LIMIT} bytes")
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PolicyFetchError(f"{url}: not UTF-8", TlsResult.STS_POLICY_INVALID) from exc

    async def post_report(self, url: str, body: bytes) -> PostResult:
        """POST a gzipped report (``application/tlsrpt+gzip``); 2xx is delivered."""
        headers = {"Content-Type": REPORT_MEDIA_TYPE}
        try:
            async with (
                self._session() as session,
                session.post(url, data=body, headers=headers, allow_redirects=False) as response,
            ):
                status = response.status
        except TimeoutError:
            return PostResult(False, f"timed out after {self._timeout:g}s")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return PostResult(False, f"{exc.__class__.__name__}: {exc}")
        return PostResult(200 <= status < 300, f"HTTP {status}")

    def _session(self) -> aiohttp.ClientSession:
        # A session per request: a few per domain per day, and no HTTP cache (RFC 8461 §3.3).
        connector = aiohttp.TCPConnector(
            resolver=self._resolver, ssl=self._context, use_dns_cache=False, force_close=True
        )
        return aiohttp.ClientSession(
            connector=connector,
            connector_owner=True,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
            headers={"Cache-Control": "no-cache"},
        )


def _check_response(url: str, status: int, content_type: str) -> None:
    if 300 <= status < 400:
        raise PolicyFetchError(f"{url}: HTTP {status}, a redirect (not followed)")
    if status != 200:
        raise PolicyFetchError(f"{url}: HTTP {status}")
    if content_type != "text/plain":
        raise PolicyFetchError(f"{url}: Content-Type {content_type!r}, expected text/plain")
