"""What a session adapts to: SIZE, 8BITMIME, the SMTP timeout, equal-preference MX hosts and
the per-host connection cap; a loopback aiosmtpd sink and a dnslib zone, nothing mocked."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import Counter
from datetime import UTC, datetime

from posthaste.adapters.dns import Resolver
from posthaste.adapters.envelope import Envelope
from posthaste.adapters.smtp_client import ClientOptions, ConnectionPool
from posthaste.adapters.smtp_transports import MxTransport
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.submission import parse_submission
from tests.dns_server import ZoneServer
from tests.integration.test_smtp_delivery import Mailer, mailer, smarthost
from tests.smtp_sink import Sink, running_sink

BODY = b"Subject: x\r\n\r\nbody\r\n"
MX = DeliveryTarget(kind="mx")


def route_example_com(zone: ZoneServer) -> None:
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")


def commands(attempt: dict[str, object]) -> list[str]:
    transcript = attempt["transcript"]
    assert isinstance(transcript, list)
    return [line["command"] for line in transcript if "command" in line]


async def relay_kept(m: Mailer, body: bytes) -> str:
    """Submit ``body`` as the SMTP relay does: the MIME is kept as it came."""
    submitted = (
        b"From: Acme <hello@acme.test>\r\nTo: someone@example.com\r\nSubject: Kept\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n\r\n" + body
    )
    principal = await m.services.teams.authenticate(m.tenant.live)
    submission = parse_submission(submitted, ["someone@example.com"], datetime.now(UTC))
    return (await m.services.sending.accept(principal, submission.request)).id


# --- the SMTP timeout -------------------------------------------------------------------------


async def test_the_regions_smtp_timeout_defers_a_stalled_session(settings: Settings) -> None:
    sink = Sink(hold=asyncio.Event())  # takes the message, then never answers the DATA
    region = settings.default_region
    configured = dataclasses.replace(settings, region_smtp_timeout={region: 0.5})
    assert configured.smtp_timeout == 30.0  # the global value stays the default
    async with running_sink(sink), mailer(configured, smarthost(sink)) as m:
        email_id = await m.send()
        started = time.monotonic()
        await m.deliver()
        waited = time.monotonic() - started
        events = (await m.get(f"/emails/{email_id}/events"))["data"]
        assert [e["type"] for e in events][-1] == "email.delivery_delayed"
        diagnostic = events[-1]["data"]["delay"]["diagnostic"]
        assert diagnostic == "451 4.4.1 No answer from the server (timed out)"
        [attempt] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        data_sent = next(
            x for x in attempt["transcript"] if x.get("command", "").startswith("DATA")
        )
        timed_out = attempt["transcript"][-1]
        assert timed_out["note"].startswith("timed out")
        assert 500 <= timed_out["elapsed_ms"] - data_sent["elapsed_ms"] < 5000
        assert waited < 10  # the region's 0.5 s, not the global 30 s


# --- MX hosts of equal preference -------------------------------------------------------------


async def test_equal_preference_mx_hosts_share_the_load(zone: ZoneServer) -> None:
    zone.set("example.com", "MX", (10, "mx-a.example.com"), (20, "backup.example.com"))
    zone.add("example.com", "MX", (10, "mx-b.example.com"))
    for host in ("mx-a", "mx-b", "backup"):
        zone.set(f"{host}.example.com", "A", "127.0.0.1")
    async with running_sink() as sink:
        transport = MxTransport(
            Resolver(zone.nameservers),
            ClientOptions("mx.test"),
            ConnectionPool(),
            sink.port,
            rng=random.Random(5),
        )
        used: Counter[str | None] = Counter()
        for i in range(20):
            envelope = Envelope("b@send.acme.test", [f"u{i}@example.com"], f"<{i}@acme.test>")
            report = await transport.send(envelope, BODY)
            assert [r.code for r in report.replies] == [250]
            used.update(log.host for log in report.sessions)
        await transport.pool.close()
    # Both preference-10 hosts carry mail; the preference-20 host only stands by.
    assert set(used) == {"mx-a.example.com", "mx-b.example.com"}
    assert min(used.values()) >= 5 and len(sink.messages) == 20


# --- the connection cap per MX host -----------------------------------------------------------


async def test_the_connection_cap_counts_per_mx_host_not_per_address(zone: ZoneServer) -> None:
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1", "127.0.0.2")
    zone.rotate = True  # each lookup answers the other address first, as real DNS does
    sink = Sink(hold=asyncio.Event(), hold_count=6)
    async with running_sink(sink, also=["127.0.0.2"]):
        pool = ConnectionPool(per_destination=2)
        transport = MxTransport(
            Resolver(zone.nameservers), ClientOptions("mx.test"), pool, sink.port
        )
        envelopes = [
            Envelope("b@send.acme.test", [f"user{i}@example.com"], f"<{i}@acme.test>")
            for i in range(6)
        ]
        sending = asyncio.gather(*(transport.send(e, BODY) for e in envelopes))
        for _ in range(500):  # until two sends are in DATA (at most 5 s)
            if sink.data_started >= 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # time for a third connection to reach DATA, were one allowed
        in_flight = sink.data_started
        assert sink.hold is not None
        sink.hold.set()
        reports = await sending
        await pool.close()
    assert in_flight == 2 and sink.connections == 2
    assert [r.code for report in reports for r in report.replies] == [250] * 6
    assert {r.address for r in sink.messages} <= {"127.0.0.1", "127.0.0.2"}


async def test_a_clear_text_connection_is_not_reused_for_enforced_tls(zone: ZoneServer) -> None:
    route_example_com(zone)
    async with running_sink() as sink:  # offers no STARTTLS
        transport = MxTransport(
            Resolver(zone.nameservers), ClientOptions("mx.test"), ConnectionPool(), sink.port
        )
        relaxed = Envelope("b@send.open.test", ["x@example.com"], "<1@open.test>")
        report = await transport.send(relaxed, BODY)
        assert [r.code for r in report.replies] == [250]
        strict = dataclasses.replace(relaxed, message_id="<2@acme.test>", tls_required=True)
        report = await transport.send(strict, BODY)
        assert [r.code for r in report.replies] == [421] and len(sink.messages) == 1
        assert "reusing" not in str(report.sessions[0].transcript)
        await transport.pool.close()
