"""What a session adapts to: SIZE, 8BITMIME, the SMTP timeout, equal-preference MX hosts and
the per-host connection cap; a loopback aiosmtpd sink and a dnslib zone, nothing mocked."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime

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
