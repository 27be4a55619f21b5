"""A recipient suppressed after acceptance is never mailed (PRODUCT §4 ``queued|scheduled →
suppressed``): a real worker, a real SMTP sink as the recipients' MX, a dnslib zone."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from posthaste.adapters.transports import build_transports
from posthaste.bootstrap import Services, build_services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.ids import format_ms, now_ms
from posthaste.storage import jobs as jobs_repo
from tests.apps import make_app
from tests.conftest import Tenant, _empty_tables, make_tenant
from tests.dns_server import ZoneServer
from tests.openapi_check import checked_client
from tests.senders import AnySender
from tests.smtp_sink import Sink, running_sink
from tests.webhook_receiver import eventually


@dataclasses.dataclass
class Mail:
    services: Services
    client: httpx.AsyncClient
    tenant: Tenant

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = self.tenant.headers("live")
        response = await self.client.request(method, path, headers=headers, **kwargs)
        assert response.status_code in (200, 201), response.text
        return response.json()

    async def send(self, **fields: Any) -> str:
        body = {"from": "Acme <hello@acme.test>", "subject": "Hi", "html": "<p>Hi</p>", **fields}
        email_id: str = (await self.call("POST", "/emails", json=body))["id"]
        return email_id

    async def suppress(self, address: str) -> None:
        await self.call("POST", "/suppressions", json={"email": address})

    async def status(self, email_id: str) -> str:
        status: str = (await self.call("GET", f"/emails/{email_id}"))["status"]
        return status

    async def events(self, email_id: str) -> list[tuple[str, list[str]]]:
        found = (await self.call("GET", f"/emails/{email_id}/events"))["data"]
        return [(e["type"], e["data"]["to"]) for e in found]

    async def settled(self, email_id: str, status: str) -> None:
        """Until the email has ``status`` and no job is left to run."""

        async def done() -> bool:
            async with self.services.db.read() as tx:
                idle = await jobs_repo.depth(tx) == 0
            return idle and await self.status(email_id) == status

        await eventually(done, what=f"email {email_id} {status}, no job left")


@asynccontextmanager
async def mail(
    settings: Settings, zone: ZoneServer, sink: Sink, retry_after: float = 0.2
) -> AsyncIterator[Mail]:
    """Posthaste delivering straight to the sink, as example.com's MX (so 250 is delivered)."""
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")
    configured = dataclasses.replace(
        settings,
        delivery=DeliveryTarget(kind="mx"),
        dns_nameservers=zone.nameservers,
        delivery_retry_schedule=(retry_after,) * 3,
    )
    services = build_services(
        configured,
        senders=AnySender(configured.default_region),
        transports=build_transports(configured, mx_port=sink.port),
    )
    await _empty_tables(services)
    await services.db.start_listening()
    try:
        async with checked_client(make_app(services)) as http:
            yield Mail(services, http, await make_tenant(services))
    finally:
        await services.close()


@asynccontextmanager
async def running_worker(services: Services) -> AsyncIterator[None]:
    worker = services.make_worker()
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        worker.stop()
        await task


async def test_a_scheduled_email_to_a_suppressed_recipient_is_not_sent(
    settings: Settings, zone: ZoneServer
) -> None:
    async with running_sink() as sink, mail(settings, zone, sink) as m:
        later = format_ms(now_ms() + 2_000)
        email_id = await m.send(to="Someone@Example.com", scheduled_at=later)
        await m.suppress("someone@example.com")
        # The worker starts only now: it takes the job when it falls due, after the suppression.
        async with running_worker(m.services):
            await m.settled(email_id, "suppressed")
        record = await m.call("GET", f"/emails/{email_id}")
        assert record["last_event"] == "email.suppressed" and record["sent_at"] is None
        assert await m.events(email_id) == [
            ("email.scheduled", ["Someone@example.com"]),
            ("email.suppressed", ["Someone@example.com"]),
        ]
        assert sink.connections == 0 and sink.messages == []
        assert (await m.call("GET", f"/emails/{email_id}/attempts"))["data"] == []


async def test_only_the_suppressed_recipient_is_skipped(
    settings: Settings, zone: ZoneServer
) -> None:
    async with running_sink() as sink, mail(settings, zone, sink) as m:
        later = format_ms(now_ms() + 2_000)
        to = ["kept@example.com", "gone@example.com"]
        email_id = await m.send(to=to, cc="copy@example.com", scheduled_at=later)
        await m.suppress("gone@example.com")
        async with running_worker(m.services):
            await m.settled(email_id, "delivered")
        assert [r.recipients for r in sink.messages] == [["copy@example.com", "kept@example.com"]]
        events = await m.events(email_id)
        assert events[:2] == [("email.scheduled", to), ("email.suppressed", ["gone@example.com"])]
        assert [kind for kind, _ in events].count("email.suppressed") == 1
        delivered = [to for kind, to in events if kind == "email.delivered"]
        assert sorted(delivered) == [["copy@example.com"], ["kept@example.com"]]
        [attempt] = (await m.call("GET", f"/emails/{email_id}/attempts"))["data"]
        assert attempt["recipients"] == ["copy@example.com", "kept@example.com"]


async def test_every_recipient_suppressed_suppresses_the_email(
    settings: Settings, zone: ZoneServer
) -> None:
    async with running_sink() as sink, mail(settings, zone, sink) as m:
        email_id = await m.send(to=["a@example.com", "b@example.com"])
        await m.suppress("a@example.com")
        await m.suppress("b@example.com")
        async with running_worker(m.services):
            await m.settled(email_id, "suppressed")
        assert await m.events(email_id) == [
            ("email.queued", ["a@example.com", "b@example.com"]),
            ("email.suppressed", ["a@example.com", "b@example.com"]),
        ]
        assert sink.connections == 0


async def test_a_deferred_recipient_suppressed_before_its_retry(
    settings: Settings, zone: ZoneServer
) -> None:
    sink = Sink(rules={"busy": "451 4.3.0 Mailbox busy, try later"})
    async with running_sink(sink), mail(settings, zone, sink, retry_after=2.0) as m:
        both = await m.send(to=["ok@example.com", "busy@example.com"])
        alone = await m.send(to="busy-too@example.com")
        # The first attempt only: the retries fall due 2 s later, after the suppressions.
        await m.services.make_worker().run_until_idle()
        assert await m.status(both) == "sent" and await m.status(alone) == "sending"
        await m.suppress("busy@example.com")
        await m.suppress("busy-too@example.com")
        async with running_worker(m.services):
            await m.settled(both, "delivered")
            await m.settled(alone, "failed")
        # Nothing was tried again: the sink saw each busy recipient once, refused.
        assert [r.recipients for r in sink.messages] == [["ok@example.com"]]
        assert (await m.events(both))[-2:] == [
            ("email.delivered", ["ok@example.com"]),
            ("email.suppressed", ["busy@example.com"]),
        ]
        # ``sending → suppressed`` is not a move of the status machine: the email fails, saying why.
        events = (await m.call("GET", f"/emails/{alone}/events"))["data"]
        assert [e["type"] for e in events] == [
            "email.queued",
            "email.sending",
            "email.delivery_delayed",
            "email.suppressed",
            "email.failed",
        ]
        assert "suppression list" in events[-1]["data"]["failed"]["reason"]
        attempts = (await m.call("GET", f"/emails/{both}/attempts"))["data"]
        assert [a["attempt"] for a in attempts] == [1]
