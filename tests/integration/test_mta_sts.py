"""MTA-STS and TLS reporting for real: a dnslib zone, an HTTPS policy server with its own CA
(``POSTHASTE_TLS_CA_FILE``), aiosmtpd MX hosts with and without STARTTLS or with a wrong
certificate, and the daily report POSTed to an https rua."""

from __future__ import annotations

import dataclasses
import gzip
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from posthaste.adapters.dns import Resolver
from posthaste.adapters.mta_sts_http import PolicyFetcher
from posthaste.adapters.transports import build_transports
from posthaste.api.app import create_app
from posthaste.bootstrap import Services, build_services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.ids import now_ms
from posthaste.core.tls_reports import (
    DAY_MS,
    REPORT_MEDIA_TYPE,
    PolicyType,
    TlsCount,
    TlsResult,
    build_report,
    day_start_ms,
)
from posthaste.services.tls_reports import TlsReportService
from posthaste.storage import mta_sts as repo
from tests.conftest import _empty_tables, make_tenant
from tests.dkim_keys import StaticSigningKeys
from tests.dns_server import ZoneServer
from tests.integration.test_cli import run_cli
from tests.integration.test_smtp_delivery import KEY, Mailer
from tests.mta_sts_server import PolicyServer, TestCa, running_policy_server
from tests.openapi_check import checked_client
from tests.senders import AnySender
from tests.smtp_sink import Sink, make_certificate, running_sink, server_context


def policy(mode: str, *mx: str, max_age: int = 86400) -> str:
    lines = ["version: STSv1", f"mode: {mode}", *(f"mx: {m}" for m in mx), f"max_age: {max_age}"]
    return "\r\n".join(lines) + "\r\n"


@dataclasses.dataclass
class World:
    ca: TestCa
    zone: ZoneServer
    web: PolicyServer


@pytest.fixture
async def world(tmp_path: Path, zone: ZoneServer) -> AsyncIterator[World]:
    ca = TestCa(tmp_path)
    context = ca.leaf(["mta-sts.example.com", "reports.example.com"])
    async with running_policy_server(context) as web:
        zone.set("example.com", "MX", (10, "mx.example.com"))
        zone.set("mx.example.com", "A", "127.0.0.1")
        zone.set("mta-sts.example.com", "A", "127.0.0.1")
        zone.set("reports.example.com", "A", "127.0.0.1")
        zone.set("_mta-sts.example.com", "TXT", "v=STSv1; id=20261127a;")
        zone.set(
            "_smtp._tls.example.com",
            "TXT",
            f"v=TLSRPTv1; rua=https://reports.example.com:{web.port}/tlsrpt,mailto:t@example.com",
        )
        yield World(ca, zone, web)


@asynccontextmanager
async def mx_mailer(settings: Settings, world: World, sink: Sink) -> AsyncIterator[Mailer]:
    configured = dataclasses.replace(
        settings,
        delivery=DeliveryTarget(kind="mx"),
        dns_nameservers=world.zone.nameservers,
        tls_ca_file=world.ca.ca_file,
        mta_sts_allow_private=True,
    )
    fetcher = PolicyFetcher(
        configured.dns_nameservers,
        ca_file=world.ca.ca_file,
        allow_private=True,
        port=world.web.port,
        timeout=10.0,
    )
    services = build_services(
        configured,
        senders=AnySender(configured.default_region),
        signing_keys=StaticSigningKeys(KEY),
        transports=build_transports(configured, mx_port=sink.port),
        policy_fetcher=fetcher,
    )
    services.mta_sts.memo_seconds = 0  # every delivery consults the cache in the database
    await _empty_tables(services)
    await services.db.start_listening()
    try:
        async with checked_client(create_app(services)) as http:
            yield Mailer(services, http, await make_tenant(services))
    finally:
        await services.close()


async def transcript_of(m: Mailer, email_id: str) -> str:
    attempts = (await m.get(f"/emails/{email_id}/attempts"))["data"]
    return " | ".join(str(line) for a in attempts for line in a["transcript"])


async def counts(m: Mailer) -> dict[tuple[str, str], int]:
    async with m.services.db.read() as tx:
        days = await repo.counted_days(tx, "9999-12-31")
        found = [c for day in days for c in await repo.counts_of_day(tx, day)]
    summed: dict[tuple[str, str], int] = {}
    for c in found:  # over the policy ids
        summed[(str(c.result), c.mx_host)] = summed.get((str(c.result), c.mx_host), 0) + c.sessions
    return summed


async def test_enforce_delivers_over_verified_tls_and_caches_the_policy(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("enforce", "*.example.com")
    tls = world.ca.leaf(["mx.example.com"])
    async with running_sink(tls=tls) as sink, mx_mailer(settings, world, sink) as m:
        first = await m.send(to="a@example.com")
        await m.deliver()
        assert (await m.get(f"/emails/{first}"))["status"] == "delivered"
        text = await transcript_of(m, first)
        assert "MTA-STS example.com: fetched policy id 20261127a" in text
        assert "MTA-STS example.com: mode enforce, mx *.example.com" in text
        assert "MTA-STS enforce: mx.example.com over verified TLS" in text
        second = await m.send(to="b@example.com")
        await m.deliver()
        assert (await m.get(f"/emails/{second}"))["status"] == "delivered"
        assert world.web.fetches == 1  # the second delivery used the cached policy
        assert [msg.tls for msg in sink.messages] == [True, True]
        async with m.services.db.read() as tx:
            cached = await repo.cached_policy(tx, "example.com")
        assert cached is not None and cached.record_id == "20261127a"
        assert cached.expires_at - cached.fetched_at == 86_400_000
        # One TLS session: the second message went on the same (verified) connection.
        assert await counts(m) == {("success", "mx.example.com"): 1}
        # A new id in the TXT record makes the next delivery fetch the policy again.
        world.zone.set("_mta-sts.example.com", "TXT", "v=STSv1; id=20261127b;")
        await m.send(to="c@example.com")
        await m.deliver()
        assert world.web.fetches == 2 and len(sink.messages) == 3
        # Past half its max_age, a policy in use is renewed; a failure keeps it in force.
        later = now_ms() + 43_300_000
        m.services.mta_sts.clock = lambda: later
        world.web.status = 503
        await m.send(to="d@example.com")
        await m.deliver()
        assert world.web.fetches == 3 and len(sink.messages) == 4
        world.web.status = 200
        await m.send(to="e@example.com")
        await m.deliver()
        async with m.services.db.read() as tx:
            renewed = await repo.cached_policy(tx, "example.com")
        assert world.web.fetches == 4 and renewed is not None and renewed.fetched_at == later


def wrong_certificate(world: World, tmp_path: Path) -> ssl.SSLContext:
    return world.ca.leaf(["other.example.org"])


def untrusted_certificate(world: World, tmp_path: Path) -> ssl.SSLContext:
    return server_context(*make_certificate(tmp_path))


def expired_certificate(world: World, tmp_path: Path) -> ssl.SSLContext:
    return world.ca.leaf(["mx.example.com"], expired=True)


@pytest.mark.parametrize(
    ("server_tls", "result"),
    [
        (None, "starttls-not-supported"),
        (wrong_certificate, "certificate-host-mismatch"),
        (untrusted_certificate, "certificate-not-trusted"),
        (expired_certificate, "certificate-expired"),
    ],
)
async def test_enforce_defers_without_verified_tls_and_testing_delivers(
    settings: Settings, world: World, tmp_path: Path, server_tls: Any, result: str
) -> None:
    world.web.policy = policy("enforce", "mx.example.com")
    tls = server_tls(world, tmp_path) if server_tls else None
    async with running_sink(tls=tls) as sink, mx_mailer(settings, world, sink) as m:
        email_id = await m.send(to="a@example.com")
        await m.deliver()
        types = await m.event_types(email_id)
        assert types[:2] == ["email.queued", "email.sending"]
        assert set(types[2:]) == {"email.delivery_delayed"}, types
        assert sink.messages == []  # never sent in the clear, nor to an unverified host
        [attempt, *_] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        [reply] = attempt["replies"]
        assert reply["code"] in (421, 451) and reply["outcome"] == "deferred", reply
        assert "MTA-STS enforce: mx.example.com refused, TLS not verified" in str(
            attempt["transcript"]
        )
        assert (result, "mx.example.com") in await counts(m)
        # The domain moves to testing (a new id): the mail goes as it would without a policy.
        world.web.policy = policy("testing", "mx.example.com")
        world.zone.set("_mta-sts.example.com", "TXT", "v=STSv1; id=2;")
        record = await m.deliver_until_settled(email_id)
        assert record["status"] == "delivered"
        assert [msg.tls for msg in sink.messages] == [tls is not None]
        assert "MTA-STS testing: mx.example.com would be refused" in await transcript_of(
            m, email_id
        )
        # Each session counted once, as the failure it would have been under the policy.
        [(key, sessions)] = (await counts(m)).items()
        assert key == (result, "mx.example.com") and sessions >= 2


async def test_enforce_defers_when_no_mx_matches_and_a_failed_refresh_keeps_the_policy(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("enforce", "mail.example.net")
    async with (
        running_sink(tls=world.ca.leaf(["mx.example.com"])) as sink,
        mx_mailer(settings, world, sink) as m,
    ):
        email_id = await m.send(to="a@example.com")
        await m.deliver()
        [attempt, *_] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        assert attempt["replies"][0]["code"] == 451
        assert "matches none of its MX hosts" in attempt["replies"][0]["text"]
        assert sink.connections == 0
        # A new id, but the policy server fails: the cached (unexpired) policy stays in force.
        world.zone.set("_mta-sts.example.com", "TXT", "v=STSv1; id=3;")
        world.web.status = 500
        await m.deliver_until_settled(email_id, rounds=3)
        text = await transcript_of(m, email_id)
        assert "policy fetch failed (sts-policy-fetch-error)" in text
        assert "keeping the cached policy id 20261127a" in text
        assert sink.messages == []


async def test_testing_delivers_to_an_mx_outside_the_policy_and_counts_it(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("testing", "mail.example.net")
    tls = world.ca.leaf(["mx.example.com"])
    async with running_sink(tls=tls) as sink, mx_mailer(settings, world, sink) as m:
        email_id = await m.send(to="a@example.com")
        await m.deliver()
        assert (await m.get(f"/emails/{email_id}"))["status"] == "delivered"
        assert "MTA-STS testing: mx.example.com not in the policy's mx" in await transcript_of(
            m, email_id
        )
        assert await counts(m) == {("validation-failure", "mx.example.com"): 1}
        assert [msg.tls for msg in sink.messages] == [True]


async def test_a_policy_that_cannot_be_fetched_is_no_policy_and_is_reported(
    settings: Settings, world: World
) -> None:
    world.web.policy = "<html>oops</html>"
    world.web.content_type = "text/html"
    tls = world.ca.leaf(["mx.example.com"])
    async with running_sink(tls=tls) as sink, mx_mailer(settings, world, sink) as m:
        email_id = await m.send(to="a@example.com")
        await m.deliver()
        assert (await m.get(f"/emails/{email_id}"))["status"] == "delivered"
        assert "Content-Type 'text/html', expected text/plain" in await transcript_of(m, email_id)
        async with m.services.db.read() as tx:
            assert await repo.cached_policy(tx, "example.com") is None
        assert await counts(m) == {("sts-policy-fetch-error", "mx.example.com"): 1}
        assert [msg.tls for msg in sink.messages] == [True]


async def test_the_daily_report_counts_sessions_and_goes_to_the_https_rua(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("testing", "mx.example.com")
    async with (
        running_sink(tls=world.ca.leaf(["mx.example.com"])) as sink,
        mx_mailer(settings, world, sink) as m,
    ):
        for to in ("a@example.com", "b@example.com"):
            await m.send(to=to)
            await m.deliver()
            await m.services.transports.close()  # each message in its own TLS session
        await m.services.tls_reports.ensure_scheduled()
        today = now_ms()
        m.services.tls_reports.clock = lambda: today + DAY_MS
        await m.deliver()  # the worker runs the tls_report job
        [report] = await m.services.tls_reports.list()
        [(content_type, body)] = world.web.reports
        assert content_type == REPORT_MEDIA_TYPE
        assert json.loads(gzip.decompress(body)) == report.report
        [entry] = report.report["policies"]
        assert entry["policy"]["policy-type"] == "sts"
        assert entry["policy"]["policy-domain"] == "example.com"
        assert entry["policy"]["mx-host"] == ["mx.example.com"]
        assert entry["summary"] == {
            "total-successful-session-count": 2,
            "total-failure-session-count": 0,
        }
        assert [(d["rua"].split(":")[0], d["status"]) for d in report.deliveries] == [
            ("https", "sent"),
            ("mailto", "not_sent"),
        ]
        assert await counts(m) == {}  # the day is reported and its counts dropped
        assert len(sink.messages) == 2


async def test_the_cli_lists_the_reports(settings: Settings, services: Services) -> None:
    report = build_report(
        "2026-11-26",
        "example.com",
        [TlsCount("2026-11-26", "example.com", PolicyType.NO_POLICY_FOUND, "", TlsResult.SUCCESS)],
        organization="posthaste.test",
        contact="postmaster@posthaste.test",
    )
    deliveries = [{"rua": "mailto:t@example.com", "status": "not_sent", "detail": "mailto"}]
    async with services.db.transaction() as tx:
        await repo.save_report(tx, "2026-11-26", "example.com", report, deliveries, now_ms())
    listed = run_cli(settings, "tls-reports", "--json")
    assert listed.returncode == 0, listed.stderr
    [stored] = json.loads(listed.stdout)["data"]
    assert stored["report"] == report and stored["deliveries"] == deliveries
    text = run_cli(settings, "tls-reports", "--day", "2026-11-26").stdout
    assert text == (
        "2026-11-26  example.com  no-policy-found  ok 1  failed 0"
        "  -> mailto:t@example.com not_sent\n"
    )
    assert run_cli(settings, "tls-reports", "--day", "2026-11-25").stdout == ""


async def test_a_day_waits_for_dns_then_is_given_up(
    services: Services, world: World, tmp_path: Path
) -> None:
    count = TlsCount(
        "2026-11-20", "example.com", PolicyType.NO_POLICY_FOUND, "", TlsResult.SUCCESS, "mx.x"
    )
    async with services.db.transaction() as tx:
        await repo.add_counts(tx, [count, count])
    fetcher = PolicyFetcher(world.zone.nameservers, ca_file=world.ca.ca_file, allow_private=True)
    start = day_start_ms("2026-11-21")
    reports = TlsReportService(
        services.db,
        Resolver(world.zone.nameservers, timeout=1.0),
        fetcher,
        "p.test",
        clock=lambda: start,
    )
    world.zone.servfail = True
    assert await reports.produce() is False  # tried again later
    async with services.db.read() as tx:
        [kept] = await repo.counts_of_day(tx, "2026-11-20")
    assert kept.sessions == 2
    reports.clock = lambda: start + 3 * DAY_MS
    assert await reports.produce() is True  # given up after two days
    async with services.db.read() as tx:
        assert await repo.counts_of_day(tx, "2026-11-20") == []
    assert await reports.list() == []
