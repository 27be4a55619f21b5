"""SSRF protection: endpoints on loopback, private, link-local or metadata addresses are refused
at create and PATCH (literal, ``localhost`` names without asking, other names through a real DNS
server) and again at delivery after resolving; all are accepted when the operator allows it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from posthaste.adapters.webhook_http import HostLookup, WebhookClient
from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from tests.apps import make_app
from tests.conftest import Tenant, make_tenant
from tests.dns_server import ZoneServer
from tests.openapi_check import checked_client
from tests.webhook_receiver import eventually, running_receiver

PUBLIC = "https://hooks.example.com/posthaste"


@pytest.fixture
def settings(settings: Settings, zone: ZoneServer) -> Settings:
    zone.add("hooks.example.com", "A", "93.184.216.34")
    zone.add("internal.example.com", "A", "10.1.2.3")
    zone.add("mixed.example.com", "A", "93.184.216.34")
    zone.add("mixed.example.com", "AAAA", "fe80::1")
    zone.add("loop.example.com", "A", "127.0.0.1")
    zone.add("ula.example.com", "AAAA", "fd12:3456::1")
    zone.add("linklocal.example.com", "A", "169.254.10.1")
    zone.add("v6.example.com", "AAAA", "2606:2800:220:1:248:1893:25c8:1946")
    zone.add("mail-only.example.com", "MX", (10, "mx.example.com"))
    return dataclasses.replace(settings, dns_nameservers=zone.nameservers)


@asynccontextmanager
async def api(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Tenant]]:
    """The API of a second set of services, on other settings, with a tenant of its own."""
    services = build_services(settings)
    try:
        async with checked_client(make_app(services)) as client:
            yield client, await make_tenant(services)
    finally:
        await services.close()


async def _create(client: httpx.AsyncClient, tenant: Tenant, **body: object) -> httpx.Response:
    return await client.post(
        "/webhooks", json={"endpoint": PUBLIC, "events": ["email.queued"], **body},
        headers=tenant.headers(),
    )  # fmt: skip


ENDPOINTS = [
    "http://127.0.0.1:8080/hook",
    "http://10.0.0.5/hook",
    "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://[::1]/hook",
    "http://[fd00:ec2::254]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://0.0.0.0/hook",
    "http://0/hook",
    "http://127.1:8080/hook",
    "http://0x7f.0.0.1/hook",
    "http://2130706433/hook",
    "http://internal.example.com/hook",
    "http://mixed.example.com/hook",
    "http://loop.example.com/hook",
    "http://ula.example.com/hook",
    "http://linklocal.example.com/hook",
    "http://localhost:9/hook",
    "http://LocalHost.:9/hook",
    "http://foo.localhost/hook",
    "http://[::1]:9/hook",
]


async def test_private_endpoints_are_refused_at_create_and_patch(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    hook_id = (await _create(client, tenant)).json()["id"]
    for endpoint in ENDPOINTS:
        response = await _create(client, tenant, endpoint=endpoint)
        assert response.status_code == 422, (endpoint, response.text)
        assert "POSTHASTE_WEBHOOK_ALLOW_PRIVATE" in response.json()["message"]
        patched = await client.patch(
            f"/webhooks/{hook_id}", json={"endpoint": endpoint}, headers=tenant.headers()
        )
        assert patched.status_code == 422, endpoint
    listed = (await client.get("/webhooks", headers=tenant.headers())).json()["data"]
    assert [h["endpoint"] for h in listed] == [PUBLIC]


async def test_localhost_names_are_refused_without_asking_dns(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer
) -> None:
    for endpoint in ("http://localhost:9/hook", "https://api.foo.localhost/hook"):
        response = await _create(client, tenant, endpoint=endpoint)
        assert response.status_code == 422
        assert "a loopback name" in response.json()["message"]
    assert not [name for name, _ in zone.queries if "localhost" in name]


async def test_public_names_are_accepted_at_create_and_patch(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer
) -> None:
    created = await _create(client, tenant)
    assert created.status_code == 201
    v6 = "https://v6.example.com/in"
    patched = await client.patch(
        f"/webhooks/{created.json()['id']}", json={"endpoint": v6}, headers=tenant.headers()
    )
    assert patched.status_code == 200 and patched.json()["endpoint"] == v6
    assert {("hooks.example.com", "A"), ("v6.example.com", "AAAA")} <= set(zone.queries)


async def test_a_name_without_an_address_is_refused(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    hook_id = (await _create(client, tenant)).json()["id"]
    for host in ("nowhere.example.com", "mail-only.example.com"):
        endpoint = f"https://{host}/hook"
        created = await _create(client, tenant, endpoint=endpoint)
        patched = await client.patch(
            f"/webhooks/{hook_id}", json={"endpoint": endpoint}, headers=tenant.headers()
        )
        for response in (created, patched):
            assert response.status_code == 422
            assert response.json()["name"] == "validation_error"
            assert f"{host} does not resolve to any address" in response.json()["message"]


async def test_a_lookup_failing_now_is_a_503(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer
) -> None:
    zone.servfail = True
    response = await _create(client, tenant, endpoint="https://hooks.example.com/in")
    assert response.status_code == 503
    assert response.json()["name"] == "service_unavailable"
    assert "hooks.example.com could not be resolved now" in response.json()["message"]


async def test_every_endpoint_is_accepted_when_private_ones_are_allowed(
    settings: Settings, zone: ZoneServer
) -> None:
    allowing = dataclasses.replace(settings, webhook_allow_private=True)
    async with api(allowing) as (client, tenant):
        hook_id = (await _create(client, tenant)).json()["id"]
        for endpoint in [*ENDPOINTS, "https://nowhere.example.com/hook"]:
            created = await _create(client, tenant, endpoint=endpoint)
            assert created.status_code == 201, (endpoint, created.text)
            patched = await client.patch(
                f"/webhooks/{hook_id}", json={"endpoint": endpoint}, headers=tenant.headers()
            )
            assert patched.status_code == 200, endpoint
    # The operator's network is trusted: nothing is looked up at create.
    assert zone.queries == []


async def test_a_name_that_turns_private_after_create_is_refused_at_delivery(
    client: httpx.AsyncClient, tenant: Tenant, services: Services, zone: ZoneServer
) -> None:
    async with running_receiver() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        zone.add("rebind.example.com", "A", "93.184.216.34")
        created = await _create(client, tenant, endpoint=f"http://rebind.example.com:{port}/hook")
        assert created.status_code == 201
        zone.set("rebind.example.com", "A", "127.0.0.1")  # DNS rebinding, to the receiver
        dispatcher = services.make_webhook_dispatcher()
        task = asyncio.create_task(dispatcher.run())
        try:
            send = {"from": "a@acme.test", "to": "b@example.com", "subject": "s", "text": "t"}
            await client.post("/emails", json=send, headers=tenant.headers())
            events_path = f"/webhooks/{created.json()['id']}/events"

            async def attempted() -> bool:
                items = (await client.get(events_path, headers=tenant.headers())).json()["data"]
                return bool(items) and items[0]["attempts"] >= 1

            await eventually(attempted, what="a refused attempt")
            [event] = (await client.get(events_path, headers=tenant.headers())).json()["data"]
            path = f"{events_path}/{event['id']}/attempts"
            attempt = (await client.get(path, headers=tenant.headers())).json()["data"][0]
            assert attempt["success"] is False and attempt["status_code"] is None
            assert "refused" in attempt["error"] and "127.0.0.1" in attempt["error"]
            assert event["status"] == "pending"  # retried later, refused again each time
            assert receiver.requests == []
        finally:
            dispatcher.stop()
            await asyncio.wait_for(task, 10)


async def test_a_literal_private_endpoint_is_refused_at_delivery_too() -> None:
    web = WebhookClient(HostLookup(()), timeout=2, allow_private=False)
    try:
        result = await web.post("http://169.254.169.254/latest", b"{}", {})
    finally:
        await web.close()
    assert result.success is False and result.error is not None
    assert "metadata" in result.error


async def test_localhost_is_refused_at_delivery_without_a_lookup(zone: ZoneServer) -> None:
    async with running_receiver() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        web = WebhookClient(HostLookup(zone.nameservers), timeout=5, allow_private=False)
        try:
            result = await web.post(f"http://localhost:{port}/hook", b"{}", {})
        finally:
            await web.close()
    assert result.error == "refused: localhost is a loopback name"
    assert receiver.requests == [] and zone.queries == []


async def test_names_resolve_through_the_configured_nameservers(zone: ZoneServer) -> None:
    async with running_receiver() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        zone.add("named.example.com", "A", "127.0.0.1")
        url = f"http://named.example.com:{port}/hook"
        allowed = WebhookClient(HostLookup(zone.nameservers), timeout=5, allow_private=True)
        guarded = WebhookClient(HostLookup(zone.nameservers), timeout=5, allow_private=False)
        try:
            delivered = await allowed.post(url, b"{}", {"Content-Type": "application/json"})
            refused = await guarded.post(url, b"{}", {"Content-Type": "application/json"})
        finally:
            await allowed.close()
            await guarded.close()
    assert delivered.success and delivered.status_code == 200
    assert receiver.requests[0].headers["Host"] == f"named.example.com:{port}"
    assert ("named.example.com", "A") in zone.queries
    assert not refused.success and refused.error is not None
    assert "named.example.com resolves to 127.0.0.1, a loopback address" in refused.error
    assert len(receiver.requests) == 1
