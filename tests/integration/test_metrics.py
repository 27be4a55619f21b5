"""``GET /metrics`` after real traffic: emails sent through the API and the SMTP relay, delivered
to a real SMTP sink, webhook attempts to a real receiver; parsed with prometheus_client's own
parser. And who may read it (a token, or loopback peers only)."""

from __future__ import annotations

import asyncio
import dataclasses
import email.policy
import smtplib
import ssl
from collections.abc import AsyncIterator
from email.message import EmailMessage

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.ids import now_ms
from posthaste.smtp.relay import Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from posthaste.storage.tables import jobs
from tests.apps import make_app
from tests.conftest import Tenant
from tests.helpers import email_body
from tests.integration.test_smtp_delivery import Mailer, mailer, smarthost
from tests.smtp_sink import running_sink
from tests.webhook_receiver import Receiver, eventually, running_receiver

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of the exposition, by name and labels."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def scrape(client: httpx.AsyncClient) -> Samples:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(response.text)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, webhook_allow_private=True, webhook_jitter=0.0)


@pytest.fixture
async def traffic(settings: Settings) -> AsyncIterator[Mailer]:
    """A server delivering to a real SMTP sink through its real smarthost transport."""
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        yield m


def _relay_submit(port: int, context: ssl.SSLContext, key: str, raw: bytes) -> str:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.starttls(context=context)
        client.login("posthaste", key)
        client.sendmail("hello@acme.test", ["ann@example.com"], raw)
        code, reply = client.noop()
        assert code == 250, reply
    return "ok"


async def relay_send(m: Mailer) -> None:
    server = RelayServer(m.services, "127.0.0.1", [Listener(0, False)])
    await server.start()
    try:
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "hello@acme.test", "ann@example.com", "Hi"
        msg.set_content("Relayed.\n")
        context = ssl.create_default_context(
            cafile=str(m.services.settings.data_dir / CERT_FILENAME)
        )
        raw = msg.as_bytes(policy=email.policy.SMTP)
        port = server.ports[0]
        await asyncio.to_thread(_relay_submit, port, context, m.tenant.live, raw)
        await eventually(lambda: not server.sessions, what="the relay session to end")
    finally:
        await server.close()


async def test_the_counts_after_sending_through_the_api_and_the_relay(traffic: Mailer) -> None:
    m = traffic
    async with running_receiver() as receiver:
        hook = await m.client.post(
            "/webhooks",
            json={"endpoint": receiver.url, "events": ["email.sent"]},
            headers=m.tenant.headers("live"),
        )
        assert hook.status_code == 201, hook.text
        ids = [await m.send(), await m.send(to="bob@example.com")]
        await relay_send(m)
        before = await scrape(m.client)
        assert value(before, "posthaste_queue_depth", kind="deliver_email") == 3
        assert value(before, "posthaste_emails_total", status="queued") == 3
        await m.get(f"/emails/{ids[0]}")
        assert (await m.client.get("/no/such/path")).status_code == 404
        await m.deliver()
        await _dispatch_until(m.services, receiver, 3)
        found = await scrape(m.client)

    accepted = "posthaste_emails_accepted_total"
    assert value(found, accepted, origin="api", stream="transactional") == 2
    assert value(found, accepted, origin="relay", stream="transactional") == 1
    assert value(found, "posthaste_emails_total", status="sent") == 3
    assert value(found, "posthaste_emails_total", status="queued") == 0
    assert value(found, "posthaste_queue_depth", kind="deliver_email") == 0
    assert value(found, "posthaste_queue_oldest_seconds", kind="deliver_email") == 0
    assert value(found, "posthaste_delivery_seconds_count") == 3
    assert value(found, "posthaste_delivery_seconds_bucket", le="+Inf") == 3
    assert value(found, "posthaste_webhook_attempts_total", outcome="success") == 3
    assert value(found, "posthaste_smtp_sessions_total", server="relay", outcome="accepted") == 1
    http = "posthaste_http_request_seconds_count"
    assert value(found, http, route="/emails", status="200") == 2
    assert value(found, http, route="/emails/{email_id}", status="200") == 1
    assert value(found, http, route="/webhooks", status="201") == 1
    assert value(found, http, route="unmatched", status="404") == 1
    assert value(found, http, route="/metrics", status="200") == 1  # the first scrape
    # Bounded labels: no raw path ever becomes a route.
    routes = {dict(labels)["route"] for name, labels in found if name == http}
    assert not [route for route in routes if ids[0] in route or route.startswith("/no/")]


async def _dispatch_until(services: Services, receiver: Receiver, count: int) -> None:
    dispatcher = services.make_webhook_dispatcher()
    task = asyncio.create_task(dispatcher.run())
    try:
        await eventually(lambda: len(receiver.requests) >= count, what="the webhook posts")
        await eventually(lambda: dispatcher.attempted >= count, what="the attempts")
    finally:
        dispatcher.stop()
        await asyncio.wait_for(task, 10)


async def test_queue_depth_and_the_wait_of_the_most_overdue_entry(
    services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    now = now_ms()
    async with services.db.transaction() as tx:
        rows = [
            {"kind": "check_domain", "ref": "d1", "available_at": now - 90_000},
            {"kind": "check_domain", "ref": "d2", "available_at": now - 30_000},
            {"kind": "check_domain", "ref": "d3", "available_at": now + 3_600_000},
            {"kind": "import_contacts", "ref": "i1", "available_at": now + 60_000},
        ]
        await tx.conn.execute(
            jobs.insert(), [{**row, "attempts": 0, "created_at": now - 100_000} for row in rows]
        )
    found = await scrape(client)
    assert value(found, "posthaste_queue_depth", kind="check_domain") == 3
    oldest = value(found, "posthaste_queue_oldest_seconds", kind="check_domain")
    assert 90 <= oldest < 90 + 60  # the most overdue of the due ones, not the created_at
    assert value(found, "posthaste_queue_depth", kind="import_contacts") == 1
    assert value(found, "posthaste_queue_oldest_seconds", kind="import_contacts") == 0  # not due
    assert value(found, "posthaste_queue_depth", kind="webhook") == 0
    # Every known queue and status is there, at zero when empty.
    assert ("posthaste_queue_depth", frozenset({("kind", "automation_step")})) in found
    assert ("posthaste_emails_total", frozenset({("status", "bounced")})) in found
    # An email accepted through the API with the webhook queue's entries: read, not counted.
    hook = await client.post(
        "/webhooks",
        json={"endpoint": "http://127.0.0.1:9/hook", "events": ["email.queued"]},
        headers=tenant.headers(),
    )
    assert hook.status_code == 201, hook.text
    sent = await client.post("/emails", json=email_body(), headers=tenant.headers())
    assert sent.status_code == 200, sent.text
    found = await scrape(client)
    assert value(found, "posthaste_queue_depth", kind="webhook") == 1
    assert value(found, "posthaste_queue_depth", kind="deliver_email") == 1


TOKEN = "metrics-token-0123456789abcdef"


async def test_with_a_token_only_its_bearer_reads_the_metrics(settings: Settings) -> None:
    from posthaste.bootstrap import build_services

    services = build_services(dataclasses.replace(settings, metrics_token=TOKEN))
    try:
        transport = httpx.ASGITransport(app=make_app(services), client=("203.0.113.7", 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://x.test") as remote:
            missing = await remote.get("/metrics")
            assert missing.status_code == 401
            assert missing.json()["name"] == "missing_api_key"
            assert missing.json()["statusCode"] == 401
            wrong = await remote.get("/metrics", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 403 and wrong.json()["name"] == "invalid_api_key"
            right = await remote.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert right.status_code == 200
            assert "posthaste_queue_depth" in right.text
    finally:
        await services.close()


async def test_without_a_token_only_loopback_peers_read_the_metrics(services: Services) -> None:
    app = make_app(services)
    for peer, status in (("127.0.0.1", 200), ("::1", 200), ("198.51.100.2", 403)):
        transport = httpx.ASGITransport(app=app, client=(peer, 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://x.test") as http:
            answer = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == status, (peer, answer.text)
            if status == 403:
                assert answer.json()["name"] == "invalid_api_key"
                assert "loopback" in answer.json()["message"]
                assert "posthaste_" not in answer.text
