"""The /webhooks resource: shapes, validation, secrets, team isolation and SSRF refusals."""

from __future__ import annotations

import re

import httpx
import pytest
from sqlalchemy import select

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from posthaste.storage.tables import webhooks
from tests.conftest import Tenant, make_tenant

PUBLIC = "https://93.184.216.34/posthaste"  # public, never contacted: no dispatcher runs


async def _create(client: httpx.AsyncClient, tenant: Tenant, **body: object) -> httpx.Response:
    return await client.post(
        "/webhooks", json={"endpoint": PUBLIC, "events": ["email.sent"], **body},
        headers=tenant.headers(),
    )  # fmt: skip


async def test_create_returns_the_secret_once(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    response = await _create(client, tenant, events=["email.sent", "email.bounced", "email.sent"])
    assert response.status_code == 201
    created = response.json()
    assert re.fullmatch(r"whsec_[0-9a-f]{48}", created["secret"])
    assert created["signing_secret"] == created["secret"]  # Resend's name, the same value
    assert created["object"] == "webhook" and created["enabled"] is True
    assert created["events"] == ["email.sent", "email.bounced"]
    assert created["endpoint"] == PUBLIC
    hook_id = created["id"]

    listed = (await client.get("/webhooks", headers=tenant.headers())).json()
    got = (await client.get(f"/webhooks/{hook_id}", headers=tenant.headers())).json()
    patched = await client.patch(
        f"/webhooks/{hook_id}", json={"enabled": False}, headers=tenant.headers()
    )
    for record in (listed["data"][0], got, patched.json()):
        assert "secret" not in record and "signing_secret" not in record
        assert record["id"] == hook_id
    assert patched.json()["enabled"] is False

    async with services.db.read() as tx:  # encrypted at rest
        stored = (await tx.conn.execute(select(webhooks.c.secret))).scalar_one()
    assert created["secret"] not in stored and created["secret"][6:] not in stored


async def test_patch_changes_endpoint_and_events_and_delete_removes(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    hook_id = (await _create(client, tenant)).json()["id"]
    new = {"endpoint": "http://93.184.216.35:8080/v2", "events": ["domain.created"]}
    response = await client.patch(f"/webhooks/{hook_id}", json=new, headers=tenant.headers())
    assert response.status_code == 200
    assert {k: response.json()[k] for k in new} == new
    gone = await client.delete(f"/webhooks/{hook_id}", headers=tenant.headers())
    assert gone.json() == {"object": "webhook", "id": hook_id, "deleted": True}
    again = await client.get(f"/webhooks/{hook_id}", headers=tenant.headers())
    assert again.status_code == 404 and again.json()["name"] == "not_found"


async def test_resend_status_beside_enabled(client: httpx.AsyncClient, tenant: Tenant) -> None:
    created = (await _create(client, tenant, status="disabled")).json()
    assert created["enabled"] is False and created["status"] == "disabled"
    hook_id = created["id"]
    url = f"/webhooks/{hook_id}"
    for body, enabled in [
        ({"status": "enabled"}, True),
        ({"enabled": False, "status": "disabled"}, False),
        ({"enabled": True}, True),
    ]:
        patched = await client.patch(url, json=body, headers=tenant.headers())
        assert patched.status_code == 200, body
        assert patched.json()["enabled"] is enabled
        assert patched.json()["status"] == ("enabled" if enabled else "disabled")
    refused = await client.patch(
        url, json={"enabled": False, "status": "enabled"}, headers=tenant.headers()
    )
    assert refused.status_code == 422 and "disagree" in refused.json()["message"]
    bad = await client.patch(url, json={"status": None}, headers=tenant.headers())
    assert bad.status_code == 422 and "status" in bad.json()["message"]
    got = (await client.get(url, headers=tenant.headers())).json()
    assert got["enabled"] is True and got["status"] == "enabled"
    listed = (await client.get("/webhooks", headers=tenant.headers())).json()["data"]
    assert [h["status"] for h in listed] == ["enabled"]


async def test_signing_secret_rotate_is_secret_rotate(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    created = (await _create(client, tenant)).json()
    secrets = [created["secret"]]
    for path in ("secret/rotate", "signing-secret/rotate"):
        response = await client.post(f"/webhooks/{created['id']}/{path}", headers=tenant.headers())
        assert response.status_code == 200, path
        rotated = response.json()
        assert re.fullmatch(r"whsec_[0-9a-f]{48}", rotated["secret"])
        assert rotated["signing_secret"] == rotated["secret"]
        mutable = ("secret", "signing_secret", "updated_at")
        assert {k: v for k, v in rotated.items() if k not in mutable} == {
            k: v for k, v in created.items() if k not in mutable
        }
        secrets.append(rotated["secret"])
    assert len(set(secrets)) == 3


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"endpoint": "ftp://hooks.example.com/x"}, "http or https"),
        ({"endpoint": "/relative"}, "absolute"),
        ({"endpoint": ""}, "endpoint"),
        ({"endpoint": 12}, "endpoint"),
        ({"events": []}, "non-empty"),
        ({"events": "email.sent"}, "non-empty"),
        ({"events": ["email.sent", "email.exploded"]}, "email.exploded"),
        ({"enabled": "yes"}, "enabled"),
        ({"status": "paused"}, "status"),
        ({"status": True}, "status"),
        ({"enabled": True, "status": "disabled"}, "disagree"),
    ],
)
async def test_invalid_fields_are_422_and_store_nothing(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, object], fragment: str
) -> None:
    response = await _create(client, tenant, **body)
    assert response.status_code == 422
    error = response.json()
    assert error["name"] == "validation_error" and error["statusCode"] == 422
    assert fragment in error["message"]
    assert (await client.get("/webhooks", headers=tenant.headers())).json()["data"] == []


async def test_another_teams_webhook_is_not_found(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    hook_id = (await _create(client, tenant)).json()["id"]
    other = await make_tenant(services)
    event_id = new_id()
    for method, path in [
        ("GET", f"/webhooks/{hook_id}"),
        ("PATCH", f"/webhooks/{hook_id}"),
        ("DELETE", f"/webhooks/{hook_id}"),
        ("POST", f"/webhooks/{hook_id}/secret/rotate"),
        ("POST", f"/webhooks/{hook_id}/signing-secret/rotate"),
        ("GET", f"/webhooks/{hook_id}/events"),
        ("GET", f"/webhooks/{hook_id}/events?limit=1"),
        ("GET", f"/webhooks/{hook_id}/events/{event_id}"),
        ("GET", f"/webhooks/{hook_id}/events/{event_id}/attempts"),
        ("POST", f"/webhooks/{hook_id}/events/{event_id}/replay"),
    ]:
        body = {"enabled": False} if method == "PATCH" else None
        response = await client.request(method, path, json=body, headers=other.headers())
        assert response.status_code == 404, (method, path)
        assert response.json()["name"] == "not_found"
    assert (await client.get("/webhooks", headers=other.headers())).json()["data"] == []
    assert (await client.get(f"/webhooks/{hook_id}", headers=tenant.headers())).status_code == 200


async def test_an_event_that_is_not_the_endpoints_is_not_found(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    hook_id = (await _create(client, tenant)).json()["id"]
    other_hook = (await _create(client, tenant)).json()["id"]
    listed = await client.get(f"/webhooks/{other_hook}/events?limit=2", headers=tenant.headers())
    assert listed.json() == {"object": "list", "data": [], "has_more": False}
    for event_id in (new_id(), "not-an-id"):
        response = await client.get(
            f"/webhooks/{hook_id}/events/{event_id}", headers=tenant.headers()
        )
        assert response.status_code == 404 and response.json()["name"] == "not_found"


async def test_a_sending_key_is_restricted(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await client.get("/webhooks", headers=tenant.headers("sending"))
    assert response.status_code == 401
    assert response.json()["name"] == "restricted_api_key"


async def test_openapi_documents_every_webhook_endpoint(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert set(paths["/webhooks"]) == {"get", "post"}
    assert set(paths["/webhooks/{webhook_id}"]) == {"get", "patch", "delete"}
    for path in (
        "/webhooks/{webhook_id}/secret/rotate",
        "/webhooks/{webhook_id}/signing-secret/rotate",
        "/webhooks/{webhook_id}/events/{event_id}/replay",
    ):
        assert "post" in paths[path]
    assert "get" in paths["/webhooks/{webhook_id}/events/{event_id}/attempts"]
    assert "get" in paths["/webhooks/{webhook_id}/events/{event_id}"]
    assert "text/event-stream" in paths["/events/stream"]["get"]["responses"]["200"]["content"]
