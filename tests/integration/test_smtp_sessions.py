"""What a session adapts to: SIZE, 8BITMIME, the SMTP timeout, equal-preference MX hosts and
the per-host connection cap; a loopback aiosmtpd sink and a dnslib zone, nothing mocked."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from posthaste.adapters.dns import Resolver
from posthaste.adapters.envelope import Envelope
from posthaste.adapters.smtp_client import IDLE_SECONDS, ClientOptions, ConnectionPool
from posthaste.adapters.smtp_transports import MxTransport
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.models import Origin
from posthaste.core.submission import parse_submission
from tests.dkim_keys import dns_record, record_name
from tests.dns_server import ZoneServer
from tests.integration.test_smtp_delivery import KEY, Mailer, mailer, smarthost, verify_dkim
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
    principal = await m.services.api_keys.authenticate(m.tenant.live)
    submission = parse_submission(submitted, ["someone@example.com"], datetime.now(UTC))
    return (await m.services.sending.accept(principal.sender, Origin.RELAY, submission.request)).id


# --- SIZE -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mx", "smtp"])
async def test_a_message_over_the_servers_size_is_not_sent_and_bounces(
    settings: Settings, zone: ZoneServer, kind: str
) -> None:
    route_example_com(zone)
    sink = Sink(size_limit=4000)
    async with running_sink(sink):
        target = MX if kind == "mx" else smarthost(sink)
        async with mailer(settings, target, zone=zone, mx_port=sink.port) as m:
            big = await m.send(
                html="<p>" + "x" * 5000 + "</p>", to=["a@example.com", "b@example.com"]
            )
            small = await m.send()
            await m.deliver()
            assert (await m.get(f"/emails/{big}"))["status"] == "bounced"
            bounces = [
                e for e in (await m.get(f"/emails/{big}/events"))["data"] if "bounce" in e["data"]
            ]
            assert sorted(e["data"]["to"][0] for e in bounces) == ["a@example.com", "b@example.com"]
            for event in bounces:
                bounce = event["data"]["bounce"]
                assert (bounce["type"], bounce["subtype"]) == ("Permanent", "MessageTooLarge")
                assert bounce["diagnostic"].startswith("552 5.3.4 Message too big: ")
                assert bounce["diagnostic"].endswith("accepts at most 4000")
            assert (await m.get("/suppressions"))["data"] == []
            [attempt] = (await m.get(f"/emails/{big}/attempts"))["data"]
            assert not any(c.startswith("MAIL FROM") for c in commands(attempt))
            assert "the server takes at most 4000 (SIZE)" in str(attempt["transcript"])
            # The message that fits is announced with its size.
            [received] = sink.messages
            raw = await m.client.get(f"/emails/{small}/raw", headers=m.tenant.headers("live"))
            assert received.data == raw.content
            assert received.mail_options == [f"SIZE={len(raw.content)}"]


async def test_no_size_parameter_to_a_server_without_size(
    settings: Settings, zone: ZoneServer
) -> None:
    route_example_com(zone)
    async with (
        running_sink(Sink(size_limit=None)) as sink,
        mailer(settings, MX, zone=zone, mx_port=sink.port) as m,
    ):
        await m.send(html="<p>" + "x" * 50_000 + "</p>")
        await m.deliver()
        [received] = sink.messages
        assert received.mail_options == [] and len(received.data) > 50_000


# --- 8BITMIME ---------------------------------------------------------------------------------


async def test_eight_bit_content_goes_with_body_8bitmime(
    settings: Settings, zone: ZoneServer
) -> None:
    route_example_com(zone)
    zone.set(record_name(KEY), "TXT", dns_record(KEY))
    async with running_sink() as sink, mailer(settings, MX, zone=zone, mx_port=sink.port) as m:
        kept = await relay_kept(m, "Grüße aus Köln, café ☕\r\n".encode())
        built = await m.send(subject="Grüße", html="<p>Grüße ☕</p>")  # built as QP: 7-bit
        await m.deliver()
        assert (await m.get(f"/emails/{kept}"))["status"] == "delivered"
        [eight_bit] = [r for r in sink.messages if not r.data.isascii()]
        raw = await m.client.get(f"/emails/{kept}/raw", headers=m.tenant.headers("live"))
        assert eight_bit.data == raw.content and "Grüße aus Köln".encode() in eight_bit.data
        assert eight_bit.mail_options == [f"SIZE={len(raw.content)}", "BODY=8BITMIME"]
        assert verify_dkim(zone, eight_bit.data)
        [seven_bit] = [r for r in sink.messages if r.data.isascii()]
        assert seven_bit.mail_options == [f"SIZE={len(seven_bit.data)}"]
        [attempt] = (await m.get(f"/emails/{kept}/attempts"))["data"]
        assert any(c.endswith(" BODY=8BITMIME") for c in commands(attempt))
        assert (await m.get(f"/emails/{built}"))["status"] == "delivered"


async def test_eight_bit_content_is_refused_for_a_server_without_8bitmime(
    settings: Settings, zone: ZoneServer
) -> None:
    route_example_com(zone)
    async with (
        running_sink(Sink(eight_bit=False)) as sink,
        mailer(settings, MX, zone=zone, mx_port=sink.port) as m,
    ):
        kept = await relay_kept(m, "Grüße\r\n".encode())
        built = await m.send(html="<p>Grüße</p>")
        await m.deliver()
        record = await m.get(f"/emails/{kept}")
        assert record["status"] == "bounced"
        bounce = (await m.get(f"/emails/{kept}/events"))["data"][-1]["data"]["bounce"]
        assert bounce["type"] == "Permanent"
        assert bounce["diagnostic"].startswith("554 5.6.3 The message has 8-bit content")
        # The 7-bit message still goes; nothing 8-bit was handed over.
        assert (await m.get(f"/emails/{built}"))["status"] == "delivered"
        assert [r.data.isascii() for r in sink.messages] == [True]


# --- the SMTP timeout -------------------------------------------------------------------------


async def test_the_regions_smtp_timeout_defers_a_stalled_session(settings: Settings) -> None:
    sink = Sink(hold=asyncio.Event())  # takes the message, then never answers the DATA
    region = settings.default_region
    # 2 s, not less: on a loaded machine every step of the session must come in well under it.
    # The retry an hour away: with the tests' 0.2 s the worker, still running until idle on a
    # loaded machine, could find it due and send it to the sink, which holds only the first DATA.
    configured = dataclasses.replace(
        settings, region_smtp_timeout={region: 2.0}, delivery_retry_schedule=(3600.0,) * 3
    )
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
        assert 2000 <= timed_out["elapsed_ms"] - data_sent["elapsed_ms"] < 25_000
        assert waited < 25  # the region's 2 s, not the global 30 s


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


async def test_the_pool_and_the_transport_keep_nothing_for_destinations_no_longer_used(
    zone: ZoneServer,
) -> None:
    """A sender to many domains: each destination's cap lives only while a session holds it,
    and idle connections too old to reuse are closed and forgotten, their destination with
    them, even when no mail goes there again."""
    for i in range(5):
        zone.set(f"d{i}.test", "MX", (10, f"mx.d{i}.test"))
        zone.set(f"mx.d{i}.test", "A", "127.0.0.1")
    async with running_sink() as sink:
        pool = ConnectionPool()
        transport = MxTransport(
            Resolver(zone.nameservers), ClientOptions("mx.test"), pool, sink.port
        )
        for i in range(5):
            envelope = Envelope("b@send.acme.test", [f"u@d{i}.test"], f"<{i}@acme.test>")
            report = await transport.send(envelope, BODY)
            assert [r.code for r in report.replies] == [250]
        assert pool.sizes() == (5, 0) and len(transport._caps) == 0
        for idle in pool._idle.values():  # as if IDLE_SECONDS went by for these five
            for conn in idle:
                conn.idle_since -= IDLE_SECONDS
        pool._swept -= IDLE_SECONDS
        zone.set("d5.test", "MX", (10, "mx.d5.test"))
        zone.set("mx.d5.test", "A", "127.0.0.1")
        report = await transport.send(
            Envelope("b@send.acme.test", ["u@d5.test"], "<5@acme.test>"), BODY
        )
        assert [r.code for r in report.replies] == [250]
        assert pool.sizes() == (1, 0)
        await pool.close()
    assert len(sink.messages) == 6
