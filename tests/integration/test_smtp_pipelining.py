"""PIPELINING (RFC 2920): to a server that offers it, MAIL, RCPT and DATA go in one write and
each recipient still gets its own reply; to one that does not, one command at a time. A real
aiosmtpd sink that notes how the client's bytes arrived; nothing mocked."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from posthaste.config import Settings
from tests.integration.test_smtp_delivery import mailer, smarthost
from tests.smtp_sink import Sink, make_certificate, running_sink, server_context, trusting

RULES = {"defer": "451 4.3.0 Mailbox busy, try later", "unknown": "550 5.1.1 No such user"}
RECIPIENTS = ["ok@example.com", "defer@example.com", "unknown@example.com"]


def commands(attempt: dict[str, Any]) -> list[str]:
    return [line["command"] for line in attempt["transcript"] if "command" in line]


def grouped(sink: Sink) -> list[bytes]:
    """The chunks that carried a MAIL command and its DATA together."""
    return [c for c in sink.chunks if b"MAIL FROM:" in c and b"DATA\r\n" in c]


async def test_a_pipelining_server_gets_the_envelope_in_one_write(settings: Settings) -> None:
    sink = Sink(rules=RULES, pipelining=True)
    async with running_sink(sink), mailer(settings, smarthost(sink)) as m:
        email_id = await m.send(to=RECIPIENTS, text=".a line with a leading dot\nmore")
        await m.deliver()
        group = grouped(sink)[0]  # on PostgreSQL the deferred's retry may follow at once
        assert group.count(b"RCPT TO:") == 3
        [received] = sink.messages
        assert received.recipients == ["ok@example.com"]
        assert b"\r\n.a line with a leading dot\r\n" in received.data  # dot-stuffing undone
        events = (await m.get(f"/emails/{email_id}/events"))["data"]
        outcomes = {(e["type"], e["data"]["to"][0]) for e in events if "to" in e["data"]}
        assert ("email.delivery_delayed", "defer@example.com") in outcomes
        assert ("email.bounced", "unknown@example.com") in outcomes
        attempt = (await m.get(f"/emails/{email_id}/attempts"))["data"][0]
        sent = commands(attempt)
        assert sent[-5:-1] == [
            *(f"RCPT TO:<{r}>" for r in sorted(RECIPIENTS)),
            "DATA",
        ]
        assert sent[-1].endswith("bytes, not shown)") and sent[-6].startswith("MAIL FROM:")
        replies = [line["reply"] for line in attempt["transcript"] if "reply" in line]
        assert replies[-5:] == [
            RULES["defer"],
            "250 2.1.5 OK",
            RULES["unknown"],
            "354 End data with <CR><LF>.<CR><LF>",
            "250 2.0.0 Ok: queued as Q1",
        ]
        assert (await m.get(f"/emails/{email_id}"))["provider_message_id"] == "Q1"


async def test_every_recipient_refused_sends_nothing_and_keeps_the_connection(
    settings: Settings,
) -> None:
    sink = Sink(rules=RULES, pipelining=True)
    async with running_sink(sink), mailer(settings, smarthost(sink)) as m:
        refused = await m.send(to=["unknown@example.com", "unknown.too@example.com"])
        await m.deliver()
        assert sink.messages == [] and len(grouped(sink)) == 1
        [attempt] = (await m.get(f"/emails/{refused}/attempts"))["data"]
        assert commands(attempt)[-1] == "RSET"
        assert (await m.get(f"/emails/{refused}"))["status"] == "bounced"
        # The refused group left the session clean: the next email goes on the same connection.
        await m.send(to=["ok@example.com"])
        await m.deliver()
        assert [r.recipients for r in sink.messages] == [["ok@example.com"]]
        assert sink.connections == 1 and len(grouped(sink)) == 2


async def test_a_server_without_pipelining_gets_one_command_at_a_time(
    settings: Settings,
) -> None:
    sink = Sink(rules=RULES)
    async with running_sink(sink), mailer(settings, smarthost(sink)) as m:
        email_id = await m.send(to=RECIPIENTS)
        await m.deliver()
        assert [r.recipients for r in sink.messages] == [["ok@example.com"]]
        assert any(b"MAIL FROM:" in c for c in sink.chunks)
        assert not [c for c in sink.chunks if b"MAIL FROM:" in c and b"RCPT TO:" in c]
        events = (await m.get(f"/emails/{email_id}/events"))["data"]
        outcomes = {(e["type"], e["data"]["to"][0]) for e in events if "to" in e["data"]}
        assert ("email.bounced", "unknown@example.com") in outcomes


@pytest.mark.parametrize("mode", ["starttls", "implicit"])
async def test_pipelining_over_tls_with_auth(settings: Settings, tmp_path: Path, mode: str) -> None:
    cert = make_certificate(tmp_path)
    sink = Sink(credentials=("relay-user", "s3cret-pass"), pipelining=True)
    context = server_context(*cert)
    async with (
        running_sink(sink, tls=context, implicit_tls=mode == "implicit", require_auth=True),
        mailer(settings, smarthost(sink, mode, "relay-user"), tls_context=trusting(cert[0])) as m,
    ):
        for _ in range(2):
            email_id = await m.send(to=["a@example.com", "b@example.com"])
            await m.deliver()
            attempts = (await m.get(f"/emails/{email_id}/attempts"))["data"]
            assert (await m.get(f"/emails/{email_id}"))["status"] == "sent", [
                a["transcript"] for a in attempts
            ]
        assert [sorted(r.recipients) for r in sink.messages] == [
            ["a@example.com", "b@example.com"]
        ] * 2
        assert all(r.tls and r.authenticated_as == "relay-user" for r in sink.messages)
        assert len(grouped(sink)) == 2 and sink.connections == 1


async def test_a_server_hanging_up_mid_group_defers_and_is_dialled_again(
    settings: Settings,
) -> None:
    sink = Sink(rules={"drop": "hang up"}, pipelining=True)
    async with running_sink(sink), mailer(settings, smarthost(sink)) as m:
        dropped = await m.send(to=["drop@example.com"])
        await m.deliver()
        events = (await m.get(f"/emails/{dropped}/events"))["data"]
        assert "email.delivery_delayed" in [e["type"] for e in events]
        assert sink.messages == []
        sink.rules.clear()
        email_id = await m.send(to=["ok@example.com"])
        await m.deliver()
        assert (await m.get(f"/emails/{email_id}"))["status"] == "sent"
        assert ["ok@example.com"] in [r.recipients for r in sink.messages]
        assert sink.connections >= 2


async def test_a_stalled_reply_to_the_message_times_out_into_a_deferral(
    settings: Settings,
) -> None:
    sink = Sink(hold=asyncio.Event(), pipelining=True)  # takes the message, never answers it
    configured = dataclasses.replace(settings, region_smtp_timeout={settings.default_region: 0.5})
    async with running_sink(sink), mailer(configured, smarthost(sink)) as m:
        email_id = await m.send()
        await m.deliver()
        events = (await m.get(f"/emails/{email_id}/events"))["data"]
        # The first attempt timed out (a retry, 0.2 s later, may have gone through since).
        delayed = next(e for e in events if e["type"] == "email.delivery_delayed")
        diagnostic = delayed["data"]["delay"]["diagnostic"]
        assert diagnostic == "451 4.4.1 No answer from the server (timed out)"
        assert len(grouped(sink)) >= 1
        # The replies read before the wait are in the transcript, the message sent after 354.
        transcript = (await m.get(f"/emails/{email_id}/attempts"))["data"][0]["transcript"]
        lines = [x.get("reply") or x.get("command") or x["note"] for x in transcript]
        assert lines[-3].startswith("354") and lines[-2].endswith("bytes, not shown)")
        assert lines[-1].startswith("timed out")
