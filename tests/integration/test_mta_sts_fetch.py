"""Fetching MTA-STS policies over real HTTPS on loopback: what is refused, and why."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from posthaste.adapters.mta_sts_http import PolicyFetcher, PolicyFetchError
from posthaste.core.mta_sts import POLICY_SIZE_LIMIT
from posthaste.core.tls_reports import TlsResult
from tests.dns_server import ZoneServer
from tests.mta_sts_server import PolicyServer, TestCa, running_policy_server

GOOD = "version: STSv1\nmode: enforce\nmx: mx.example.com\nmax_age: 600\n"


@pytest.fixture
async def served(tmp_path: Path, zone: ZoneServer) -> AsyncIterator[tuple[TestCa, PolicyServer]]:
    ca = TestCa(tmp_path)
    zone.set("mta-sts.example.com", "A", "127.0.0.1")
    zone.set("mta-sts.wrong.example", "A", "127.0.0.1")
    async with running_policy_server(ca.leaf(["mta-sts.example.com"])) as web:
        web.policy = GOOD
        yield ca, web


def fetcher(zone: ZoneServer, ca: TestCa, web: PolicyServer, **options: bool) -> PolicyFetcher:
    allow = options.get("allow_private", True)
    return PolicyFetcher(
        zone.nameservers, ca_file=ca.ca_file, allow_private=allow, port=web.port, timeout=10.0
    )


async def test_a_policy_is_fetched_through_our_dns_with_our_ca(
    zone: ZoneServer, served: tuple[TestCa, PolicyServer]
) -> None:
    ca, web = served
    assert await fetcher(zone, ca, web).fetch("example.com") == GOOD
    assert ("mta-sts.example.com", "A") in zone.queries


async def test_loopback_is_refused_unless_allowed(
    zone: ZoneServer, served: tuple[TestCa, PolicyServer]
) -> None:
    ca, web = served
    with pytest.raises(PolicyFetchError, match=r"resolves to 127\.0\.0\.1, a loopback address"):
        await fetcher(zone, ca, web, allow_private=False).fetch("example.com")
    assert web.fetches == 0


@pytest.mark.parametrize(
    ("status", "content_type", "body", "reason"),
    [
        (302, "text/plain", "", "HTTP 302, a redirect"),
        (404, "text/plain", "", "HTTP 404"),
        (200, "text/html", GOOD, "Content-Type 'text/html'"),
        (200, "text/plain", "x" * (POLICY_SIZE_LIMIT + 1), f"larger than {POLICY_SIZE_LIMIT}"),
    ],
)
async def test_what_is_not_a_policy_is_a_fetch_error(
    zone: ZoneServer,
    served: tuple[TestCa, PolicyServer],
    status: int,
    content_type: str,
    body: str,
    reason: str,
) -> None:
    ca, web = served
    web.status, web.content_type, web.policy = status, content_type, body
    with pytest.raises(PolicyFetchError, match=re.escape(reason)) as caught:
        await fetcher(zone, ca, web).fetch("example.com")
    assert caught.value.result is TlsResult.STS_POLICY_FETCH_ERROR


async def test_a_certificate_for_another_name_is_sts_webpki_invalid(
    zone: ZoneServer, served: tuple[TestCa, PolicyServer]
) -> None:
    ca, web = served
    with pytest.raises(PolicyFetchError, match="certificate not valid") as caught:
        await fetcher(zone, ca, web).fetch("wrong.example")
    assert caught.value.result is TlsResult.STS_WEBPKI_INVALID
