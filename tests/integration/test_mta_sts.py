"""MTA-STS and TLS reporting for real: a dnslib zone, an HTTPS policy server with its own CA
(``POSTHASTE_TLS_CA_FILE``), aiosmtpd MX hosts with and without STARTTLS or with a wrong
certificate, and the daily report POSTed to an https rua.

Policies are fetched by ``refresh_mta_sts`` jobs, never by a delivery: ``deliver_only`` runs a
worker that handles deliveries and nothing else, to show what a delivery does on its own."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from posthaste.adapters.dns import Resolver
from posthaste.adapters.mta_sts_http import PolicyFetcher
from posthaste.adapters.smtp_client import Transcript
from posthaste.adapters.transports import build_transports
from posthaste.bootstrap import Services, build_services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.ids import now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.pools import Pool, Pools
from posthaste.core.tls_reports import (
    DAY_MS,
    REPORT_MEDIA_TYPE,
    PolicyType,
    TlsCount,
    TlsResult,
    build_report,
    day_start_ms,
)
from posthaste.services.mta_sts import PATIENCE_MS, MtaStsPolicies
from posthaste.services.tls_reports import TlsReportService
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import mta_sts as repo
from posthaste.storage.tables import jobs
from posthaste.workers.kinds import build_handlers
from posthaste.workers.runner import Worker
from tests.apps import make_app
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
async def mx_mailer(
    settings: Settings, world: World, sink: Sink, pools: Pools | None = None
) -> AsyncIterator[Mailer]:
    configured = dataclasses.replace(
        settings,
        delivery=DeliveryTarget(kind="mx"),
        dns_nameservers=world.zone.nameservers,
        tls_ca_file=world.ca.ca_file,
        mta_sts_allow_private=True,
        pools=pools or settings.pools,
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
    services.mta_sts.wait_ms = 50  # mail held for a first fetch comes back at once
    await _empty_tables(services)
    await services.db.start_listening()
    try:
        async with checked_client(make_app(services)) as http:
            yield Mailer(services, http, await make_tenant(services))
    finally:
        await services.close()


async def transcript_of(m: Mailer, email_id: str) -> str:
    attempts = (await m.get(f"/emails/{email_id}/attempts"))["data"]
    return " | ".join(str(line) for a in attempts for line in a["transcript"])


async def all_counts(services: Services) -> list[TlsCount]:
    async with services.db.read() as tx:
        days = await repo.counted_days(tx, "9999-12-31")
        return [c for day in days for c in await repo.counts_of_day(tx, day)]


async def counts(m: Mailer) -> dict[tuple[str, str], int]:
    summed: dict[tuple[str, str], int] = {}
    for c in await all_counts(m.services):  # over the policy ids
        summed[(str(c.result), c.mx_host)] = summed.get((str(c.result), c.mx_host), 0) + c.sessions
    return summed


async def deliver_only(m: Mailer) -> None:
    """Run every due delivery, and nothing else: no policy is fetched."""
    kind = JobKind.DELIVER_EMAIL
    handler = build_handlers(m.services).batched[kind]
    worker = Worker(m.services.db, {}, batch_handlers={kind: handler}, lease_seconds=30)
    await worker.run_until_idle()


async def deliver_until(m: Mailer, email_id: str, *statuses: str) -> dict[str, Any]:
    """Run the worker (held mail comes back after 50 ms, retries after 0.2 s) until the email
    is in one of ``statuses``, for 10 s at most."""
    for _ in range(200):
        await m.deliver()
        record: dict[str, Any] = await m.get(f"/emails/{email_id}")
        if record["status"] in statuses:
            return record
        await asyncio.sleep(0.05)
    raise AssertionError(f"email {email_id} still {record['status']}, not {statuses}")


async def fetch_now(m: Mailer) -> None:
    """Make the pending policy fetches due now and run them."""
    async with m.services.db.transaction() as tx:
        await jobs_repo.move(tx, JobKind.REFRESH_MTA_STS, "example.com", 0)
    await m.deliver()


async def prefetched(m: Mailer) -> None:
    """The policy fetched and cached before the first mail (the tests that are not about the
    first fetch: with the tests' short retry schedule, mail held too long counts an attempt)."""
    assert await m.services.mta_sts_refresher.refresh("example.com") is None


async def attempted(m: Mailer, email_id: str) -> list[dict[str, Any]]:
    attempts: list[dict[str, Any]] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
    return attempts


async def refresh_jobs(services: Services) -> list[tuple[str, int]]:
    """The pending ``refresh_mta_sts`` jobs: (domain, available_at)."""
    query = select(jobs.c.ref, jobs.c.available_at).where(jobs.c.kind == JobKind.REFRESH_MTA_STS)
    async with services.db.read() as tx:
        return [(row.ref, row.available_at) for row in await tx.conn.execute(query)]


def metric(services: Services, name: str, **labels: str) -> float:
    """A counter's value in this process's metrics (0 when it has no such series)."""
    for family in text_string_to_metric_families(services.metrics.exposition().decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def test_enforce_delivers_over_verified_tls_and_caches_the_policy(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("enforce", "*.example.com")
    tls = world.ca.leaf(["mx.example.com"])
    patient = dataclasses.replace(settings, delivery_retry_schedule=(30.0,))  # see prefetched
    async with running_sink(tls=tls) as sink, mx_mailer(patient, world, sink) as m:
        first = await m.send(to="a@example.com")
        # Nothing cached: a delivery on its own fetches nothing and holds the mail unsent.
        await deliver_only(m)
        assert world.web.fetches == 0 and sink.connections == 0
        assert await attempted(m, first) == []  # a hold is no attempt
        assert [ref for ref, _ in await refresh_jobs(m.services)] == ["example.com"]
        # The refresh job fetches the policy; the mail then goes under it.
        await deliver_until(m, first, "delivered")
        assert world.web.fetches == 1 and await refresh_jobs(m.services) == []
        text = await transcript_of(m, first)
        assert "MTA-STS example.com: mode enforce, mx *.example.com" in text
        assert "MTA-STS enforce: mx.example.com over verified TLS" in text
        second = await m.send(to="b@example.com")
        await deliver_only(m)
        assert (await m.get(f"/emails/{second}"))["status"] == "delivered"
        assert world.web.fetches == 1  # the second delivery used the cached policy
        assert [msg.tls for msg in sink.messages] == [True, True]
        async with m.services.db.read() as tx:
            cached = await repo.cached_policy(tx, "example.com")
        assert cached is not None and cached.record_id == "20261127a"
        assert cached.expires_at - cached.fetched_at == 86_400_000
        # One TLS session: the second message went on the same (verified) connection.
        assert await counts(m) == {("success", "mx.example.com"): 1}

        # A new id in the TXT record: the delivery goes under the cached policy at once, and
        # the new one is fetched in the background.
        world.zone.set("_mta-sts.example.com", "TXT", "v=STSv1; id=20261127b;")
        third = await m.send(to="c@example.com")
        await deliver_only(m)
        assert (await m.get(f"/emails/{third}"))["status"] == "delivered"
        assert world.web.fetches == 1 and len(sink.messages) == 3
        assert "announces id 20261127b; cached policy id 20261127a applies" in (
            await transcript_of(m, third)
        )
        await m.deliver()
        async with m.services.db.read() as tx:
            cached = await repo.cached_policy(tx, "example.com")
        assert world.web.fetches == 2 and cached is not None and cached.record_id == "20261127b"

        # Past half its max_age a policy in use is renewed in the background; a failure keeps
        # it in force and is tried again later.
        later = now_ms() + 43_300_000
        m.services.mta_sts.clock = m.services.mta_sts_refresher.clock = lambda: later
        world.web.status = 503
        fourth = await m.send(to="d@example.com")
        await deliver_only(m)
        assert (await m.get(f"/emails/{fourth}"))["status"] == "delivered"
        await fetch_now(m)  # the job is due at the shifted clock's now
        assert world.web.fetches == 3 and len(sink.messages) == 4
        [(_, due)] = await refresh_jobs(m.services)
        assert due == later + 5 * 60_000  # the first retry, five minutes on
        async with m.services.db.read() as tx:
            kept = await repo.cached_policy(tx, "example.com")
        assert kept == cached
        world.web.status = 200
        await fetch_now(m)
        async with m.services.db.read() as tx:
            renewed = await repo.cached_policy(tx, "example.com")
        assert world.web.fetches == 4 and renewed is not None and renewed.fetched_at == later
        assert await refresh_jobs(m.services) == []
        fetches = "posthaste_mta_sts_policy_fetches_total"
        assert metric(m.services, fetches, outcome="ok") == 3
        assert metric(m.services, fetches, outcome="failed") == 1


async def test_a_domain_is_fetched_once_however_many_workers_ask(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("testing", "mx.example.com")
    async with running_sink() as sink, mx_mailer(settings, world, sink) as m:
        services = m.services
        workers = [
            MtaStsPolicies(services.db, Resolver(world.zone.nameservers), memo_seconds=0)
            for _ in range(3)
        ]
        decisions = await asyncio.gather(
            *(w.policy_for("example.com", Transcript()) for w in workers)
        )
        assert all(d.hold_until is not None for d in decisions)
        # Two more jobs for the same domain, as workers racing to ask would add.
        async with services.db.transaction() as tx:
            for _ in range(2):
                await jobs_repo.enqueue(tx, JobKind.REFRESH_MTA_STS, "example.com", None, 0, 0)
        await asyncio.gather(*(services.make_worker().run_until_idle() for _ in range(3)))
        assert world.web.fetches == 1
        assert await refresh_jobs(services) == []
        decision = await workers[0].policy_for("example.com", Transcript())
        assert decision.hold_until is None and decision.mode == "testing"


async def test_mail_waits_for_a_first_fetch_only_so_long(settings: Settings, world: World) -> None:
    world.web.policy = policy("enforce", "mx.example.com")
    tls = world.ca.leaf(["mx.example.com"])
    patient = dataclasses.replace(settings, delivery_retry_schedule=(30.0,))  # see prefetched
    async with running_sink(tls=tls) as sink, mx_mailer(patient, world, sink) as m:
        email_id = await m.send(to="a@example.com")
        await deliver_only(m)
        assert await attempted(m, email_id) == []
        assert sink.connections == 0 and len(await refresh_jobs(m.services)) == 1
        # No worker fetched it in time: the mail goes as without a policy, and the session
        # is counted as one that went without the policy the domain announced.
        later = now_ms() + PATIENCE_MS + 1
        m.services.mta_sts.clock = lambda: later
        for _ in range(100):
            await deliver_only(m)
            if sink.messages:
                break
            await asyncio.sleep(0.05)
        assert (await m.get(f"/emails/{email_id}"))["status"] == "delivered"
        assert "policy id 20261127a not fetched after 120 s; sending as without a policy" in (
            await transcript_of(m, email_id)
        )
        assert world.web.fetches == 0
        assert await counts(m) == {("sts-policy-fetch-error", "mx.example.com"): 1}


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
        await prefetched(m)
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
        # Each failure names the address the session left from (the machine's own).
        assert {c.sending_ip for c in await all_counts(m.services)} == {"127.0.0.1"}
        assert metric(m.services, "posthaste_mta_sts_enforce_deferrals_total") >= 1
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
    settings: Settings, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.web.policy = policy("enforce", "mail.example.net")
    async with (
        running_sink(tls=world.ca.leaf(["mx.example.com"])) as sink,
        mx_mailer(settings, world, sink) as m,
    ):
        await prefetched(m)
        email_id = await m.send(to="a@example.com")
        await m.deliver()
        [attempt, *_] = await attempted(m, email_id)
        assert attempt["replies"][0]["code"] == 451
        assert "matches none of its MX hosts" in attempt["replies"][0]["text"]
        assert sink.connections == 0
        # A new id, but the policy server fails: the cached (unexpired) policy stays in force.
        world.zone.set("_mta-sts.example.com", "TXT", "v=STSv1; id=3;")
        world.web.status = 500
        with caplog.at_level(logging.WARNING, "posthaste.services.mta_sts"):
            await m.deliver_until_settled(email_id, rounds=3)
        text = await transcript_of(m, email_id)
        assert "announces id 3; cached policy id 20261127a applies while it is fetched" in text
        assert "policy id 3 fetch failed (sts-policy-fetch-error: " in caplog.text
        assert "keeping policy id 20261127a, trying again at" in caplog.text
        assert world.web.fetches == 2 and len(await refresh_jobs(m.services)) == 1
        assert sink.messages == []


async def test_testing_delivers_to_an_mx_outside_the_policy_and_counts_it(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("testing", "mail.example.net")
    tls = world.ca.leaf(["mx.example.com"])
    async with running_sink(tls=tls) as sink, mx_mailer(settings, world, sink) as m:
        email_id = await m.send(to="a@example.com")
        await deliver_until(m, email_id, "delivered")
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
        await deliver_until(m, email_id, "delivered")
        text = await transcript_of(m, email_id)
        assert "policy id 20261127a could not be fetched (sts-policy-fetch-error: " in text
        assert "Content-Type 'text/html', expected text/plain); sending as without" in text
        async with m.services.db.read() as tx:
            failed = await repo.cached_policy(tx, "example.com")
        assert (
            failed is not None and failed.failed and failed.fetch_error == "sts-policy-fetch-error"
        )
        assert await counts(m) == {("sts-policy-fetch-error", "mx.example.com"): 1}
        assert [msg.tls for msg in sink.messages] == [True]
        # The failure is not fetched again for five minutes, however much mail goes.
        again = await m.send(to="b@example.com")
        await deliver_until(m, again, "delivered")
        assert world.web.fetches == 1 and await refresh_jobs(m.services) == []
        fetches = "posthaste_mta_sts_policy_fetches_total"
        assert metric(m.services, fetches, outcome="failed") == 1


async def test_the_daily_report_counts_sessions_and_goes_to_the_https_rua(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("testing", "mx.example.com")
    async with (
        running_sink(tls=world.ca.leaf(["mx.example.com"])) as sink,
        mx_mailer(settings, world, sink) as m,
    ):
        for to in ("a@example.com", "b@example.com"):
            await deliver_until(m, await m.send(to=to), "delivered")
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


async def test_a_failed_session_names_the_pool_address_it_left_from(
    settings: Settings, world: World
) -> None:
    world.web.policy = policy("enforce", "mx.example.com")
    warm = Pools({"warm": Pool("warm", ("127.0.0.2",), "warm.example.test")})
    async with running_sink() as sink, mx_mailer(settings, world, sink, warm) as m:  # no TLS
        headers = m.tenant.headers("live")
        body = {"pool": "warm"}
        patched = await m.client.patch("/streams/transactional", json=body, headers=headers)
        assert patched.status_code == 200, patched.text
        await prefetched(m)
        email_id = await m.send(to="a@example.com")
        await m.deliver()
        assert sink.messages == [] and len(await attempted(m, email_id)) == 1
        [count] = await all_counts(m.services)
        assert (count.result, count.sending_ip) == (TlsResult.STARTTLS_NOT_SUPPORTED, "127.0.0.2")
        report = build_report(
            count.day, "example.com", [count], organization="p.test", contact="pm@p.test"
        )
        [detail] = report["policies"][0]["failure-details"]
        assert detail["sending-mta-ip"] == "127.0.0.2"
        assert detail["receiving-ip"] == "127.0.0.1"


def past_counts(*domains: str) -> list[TlsCount]:
    return [
        TlsCount("2026-11-20", d, PolicyType.NO_POLICY_FOUND, "", TlsResult.SUCCESS, "mx.x")
        for d in domains
    ]


async def test_reports_are_made_several_domains_at_a_time(settings: Settings, world: World) -> None:
    names = [f"d{i}.example" for i in range(4)]
    rua = f"https://reports.example.com:{world.web.port}/tlsrpt"
    for name in names:
        world.zone.set(f"_smtp._tls.{name}", "TXT", f"v=TLSRPTv1; rua={rua}")
    async with running_sink() as sink, mx_mailer(settings, world, sink) as m:
        async with m.services.db.transaction() as tx:
            await repo.add_counts(tx, past_counts(*names))
        service = m.services.tls_reports
        service.concurrency = 2
        service.clock = lambda: day_start_ms("2026-11-21")
        world.web.gate = 2  # each upload waits (5 s at most) for another one under way
        assert await service.produce() is True
        assert world.web.most_at_once == 2  # two at once, never more
        stored = await service.list()
        assert sorted(r.policy_domain for r in stored) == names
        assert {d["status"] for r in stored for d in r.deliveries} == {"sent"}
        assert metric(m.services, "posthaste_tls_report_uploads_total", outcome="sent") == 4


async def test_a_failed_upload_is_tried_again_then_given_up(
    settings: Settings, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    base = f"https://reports.example.com:{world.web.port}"
    world.zone.set("_smtp._tls.late.example", "TXT", f"v=TLSRPTv1; rua={base}/tlsrpt")
    broken = f"v=TLSRPTv1; rua={base}/broken,mailto:tls@broken.example"
    world.zone.set("_smtp._tls.broken.example", "TXT", broken)
    async with running_sink() as sink, mx_mailer(settings, world, sink) as m:
        async with m.services.db.transaction() as tx:
            await repo.add_counts(tx, past_counts("late.example", "broken.example"))
        service = m.services.tls_reports
        service.retries_ms = (1, 1, 1)  # the next try is due at once (the clock is in the past)
        service.clock = lambda: day_start_ms("2026-11-21")
        world.web.refuse_reports = 2  # late.example's first two uploads get a 503
        with caplog.at_level(logging.INFO, "posthaste.services.tls_reports"):
            assert await service.produce() is True
            first = {r.policy_domain: r.deliveries for r in await service.list()}
            assert [d["status"] for d in first["late.example"]] == ["retrying"]
            async with m.services.db.read() as tx:
                assert await jobs_repo.depth(tx) == 2  # one upload_tls_report job per report
            for _ in range(50):
                await m.deliver()
                async with m.services.db.read() as tx:
                    if await jobs_repo.depth(tx) == 0:
                        break
                await asyncio.sleep(0.05)
        final = {r.policy_domain: r.deliveries for r in await service.list()}
        [late] = final["late.example"]
        assert (late["status"], late["tries"], late["detail"]) == ("sent", 3, "HTTP 201")
        [https, mailto] = final["broken.example"]
        assert (https["status"], https["tries"], https["detail"]) == ("failed", 4, "HTTP 500")
        assert mailto["status"] == "not_sent"
        assert world.web.broken_posts == 4 and len(world.web.reports) == 1
        uploads = "posthaste_tls_report_uploads_total"
        assert metric(m.services, uploads, outcome="sent") == 1
        assert metric(m.services, uploads, outcome="retrying") == 5
        assert metric(m.services, uploads, outcome="failed") == 1
        assert (
            f"TLS report of broken.example to {base}/broken failed (try 4): HTTP 500; given up"
            in (caplog.text)
        )
        assert f"TLS report of late.example sent to {base}/tlsrpt (HTTP 201)" in caplog.text
