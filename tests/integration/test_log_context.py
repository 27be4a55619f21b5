"""Every JSON log line names what it was logged within: the HTTP request (``request_id``, the
``X-Request-Id`` answered), the SMTP session (``session_id``) and the email being delivered
(``email_id``). Lines are read as the JSON formatter writes them."""

from __future__ import annotations

import asyncio
import email.policy
import logging
import re
import smtplib
import ssl
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.dkim import DkimKey
from posthaste.logs import JsonFormatter
from posthaste.smtp.inbound import InboundServer
from posthaste.smtp.relay import Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from tests.apps import make_app
from tests.conftest import Tenant
from tests.integration.test_smtp_delivery import KEY, mailer, smarthost
from tests.smtp_sink import running_sink
from tests.webhook_receiver import eventually


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(self.format(record)))

    def where(self, **fields: object) -> list[dict[str, Any]]:
        return [line for line in self.lines if all(line.get(k) == v for k, v in fields.items())]


@pytest.fixture
def logged() -> Iterator[_Lines]:
    """Every line logged during the test, formatted as ``posthaste serve`` writes it."""
    handler = _Lines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_every_line_of_a_request_names_its_request_id(
    services: Services, tenant: Tenant, logged: _Lines
) -> None:
    app = make_app(services)
    probe = logging.getLogger("posthaste.test.probe")

    async def later() -> None:
        await asyncio.sleep(0)
        probe.info("from a task the request started")

    @app.get("/probe")
    async def probe_route() -> dict[str, str]:
        probe.info("inside the request")
        await asyncio.create_task(later())
        return {}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://x.test") as client:
        given = await client.get("/probe", headers={"X-Request-Id": "req-abc-123"})
        made = await client.get("/emails", headers=tenant.headers())
    assert given.headers["x-request-id"] == "req-abc-123"
    probe.info("outside any request")
    mine = logged.where(request_id="req-abc-123")
    assert [line["message"] for line in mine] == [
        "inside the request",
        "from a task the request started",
        "GET /probe 200",
    ]
    other = made.headers["x-request-id"]
    assert len(other) == 32 and other != "req-abc-123"
    assert [line["message"] for line in logged.where(request_id=other)] == ["GET /emails 200"]
    [outside] = logged.where(message="outside any request")
    assert "request_id" not in outside


def _relay_session(port: int, context: ssl.SSLContext, key: str, raw: bytes | None) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.starttls(context=context)
        if raw is None:
            with pytest.raises(smtplib.SMTPAuthenticationError):
                client.login("posthaste", "re_not_a_key")
            return
        client.login("posthaste", key)
        client.sendmail("hello@acme.test", ["ann@example.com"], raw)


def _inbound_session(port: int) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.ehlo("mx.sender.test")
        client.mail("someone@sender.test")
        code, _ = client.rcpt("nobody@not-ours.test")
        assert code == 550


def _sessions(services: Services) -> dict[tuple[str, str], float]:
    text = services.metrics.exposition().decode()
    return {
        (s.labels["server"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "posthaste_smtp_sessions_total"
    }


async def test_every_line_of_an_smtp_session_names_its_session(
    services: Services, tenant: Tenant, logged: _Lines
) -> None:
    relay = RelayServer(services, "127.0.0.1", [Listener(0, False)])
    inbound = InboundServer(services, "127.0.0.1", [Listener(0, False)])
    await relay.start()
    await inbound.start()
    try:
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "hello@acme.test", "ann@example.com", "Hi"
        msg.set_content("Relayed.\n")
        raw = msg.as_bytes(policy=email.policy.SMTP)
        context = ssl.create_default_context(cafile=str(services.settings.data_dir / CERT_FILENAME))
        port = relay.ports[0]
        await asyncio.to_thread(_relay_session, port, context, tenant.test, raw)
        await asyncio.to_thread(_relay_session, port, context, tenant.test, None)
        await asyncio.to_thread(_inbound_session, inbound.ports[0])
        await eventually(lambda: not relay.sessions and not inbound.sessions, what="the ends")
    finally:
        await relay.close()
        await inbound.close()
    [accepted] = [line for line in logged.lines if line["message"].startswith("relay accepted")]
    first = accepted["session_id"]
    assert accepted["email_id"] in accepted["message"]
    session_of = {line.get("session_id") for line in logged.lines if "Peer:" in line["message"]}
    assert len(session_of) == 3 and None not in session_of and first in session_of
    for session in session_of:  # each from its connection to its end, aiosmtpd's lines too
        lines = [line["message"] for line in logged.where(session_id=session)]
        assert "Peer:" in lines[0], lines
        assert [line for line in lines if line.endswith(") connection lost")], lines
    assert len(logged.where(session_id=first)) > 3
    # At INFO, aiosmtpd's line per command is left out; each refusal is a line of its own.
    messages = [line["message"] for line in logged.lines]
    assert not [m for m in messages if " >> " in m or " sender: " in m or " recip: " in m]
    refusals = [line for line in logged.lines if line["message"].startswith("refused: ")]
    assert {line["message"][9:12] for line in refusals} == {"535", "550"}, refusals
    assert None not in {line.get("session_id") for line in refusals}
    assert _sessions(services) == {
        ("relay", "accepted"): 1,
        ("relay", "refused"): 1,
        ("inbound", "refused"): 1,
    }


async def test_smtp_command_lines_are_logged_at_debug(services: Services, logged: _Lines) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    inbound = InboundServer(services, "127.0.0.1", [Listener(0, False)])
    await inbound.start()
    try:
        await asyncio.to_thread(_inbound_session, inbound.ports[0])
        await eventually(lambda: not inbound.sessions, what="the end")
    finally:
        await inbound.close()
    messages = [line["message"] for line in logged.lines]
    assert [m for m in messages if " >> " in m and "mail FROM:" in m], messages
    assert [m for m in messages if " sender: someone@sender.test" in m], messages


async def test_the_lines_of_a_delivery_name_its_email(settings: Settings, logged: _Lines) -> None:
    broken = DkimKey("broken.test", "s1", b"-----BEGIN PRIVATE KEY-----\nnot a key\n")
    async with running_sink() as sink, mailer(settings, smarthost(sink), keys=(KEY, broken)) as m:
        bad = await m.send(**{"from": "hello@broken.test"})
        good = await m.send()
        await m.deliver()  # both in one batch
        assert (await m.get(f"/emails/{good}"))["status"] == "sent"
    [line] = [line for line in logged.lines if "could not be built" in line["message"]]
    assert line["email_id"] == bad and line["level"] == "error"
    assert not logged.where(email_id=good)  # nothing went wrong with it


async def test_each_delivery_conversation_has_a_session_id_in_its_transcript(
    settings: Settings,
) -> None:
    """The outbound SMTP conversation of each attempt is named like the servers' sessions: its
    transcript's first note, and every line logged during it."""
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        first, second = await m.send(), await m.send()
        await m.deliver()
        sessions = []
        for email_id in (first, second):
            [attempt] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
            note = attempt["transcript"][0]["note"]
            assert re.fullmatch(r"session [0-9a-f]{32}", note), note
            sessions.append(note)
        assert sessions[0] != sessions[1]
