"""/events: custom events defined with a payload schema (Resend's Events calls), and what a
schema means for ``POST /events/send``; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from posthaste.bootstrap import Services
from tests.conftest import Tenant, make_tenant

SCHEMA = {"plan": "string", "seats": "number", "trial": "boolean", "renews": "date"}


async def define(
    client: httpx.AsyncClient, tenant: Tenant, name: str, schema: Any = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name}
    if schema is not None:
        body["schema"] = schema
    response = await client.post("/events", json=body, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_define_read_by_id_or_name_list_change_and_delete(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = tenant.headers()
    paid = await define(client, tenant, "order.paid", SCHEMA)
    assert paid["object"] == "event" and paid["name"] == "order.paid"
    assert paid["schema"] == SCHEMA and paid["updated_at"] == paid["created_at"]
    for ref in (paid["id"], "order.paid", paid["id"].upper()):
        got = await client.get(f"/events/{ref}", headers=headers)
        assert got.status_code == 200 and got.json() == paid
    bare = await define(client, tenant, "trial-started")
    assert bare["schema"] is None

    listed = (await client.get("/events", headers=headers)).json()
    assert [e["id"] for e in listed["data"]] == [paid["id"], bare["id"]]
    assert listed["has_more"] is False
    first = (await client.get("/events?limit=1", headers=headers)).json()
    assert [e["name"] for e in first["data"]] == ["order.paid"] and first["has_more"] is True
    after = (await client.get(f"/events?limit=1&after={paid['id']}", headers=headers)).json()
    assert [e["name"] for e in after["data"]] == ["trial-started"] and after["has_more"] is False

    changed = await client.patch(
        "/events/order.paid", json={"schema": {"plan": "string"}}, headers=headers
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["id"] == paid["id"] and changed.json()["schema"] == {"plan": "string"}
    cleared = await client.patch(f"/events/{paid['id']}", json={"schema": None}, headers=headers)
    assert cleared.json()["schema"] is None
    assert (await client.get("/events/order.paid", headers=headers)).json()["schema"] is None

    gone = await client.delete("/events/trial-started", headers=headers)
    assert gone.json() == {"object": "event", "id": bare["id"], "deleted": True}
    assert (await client.get(f"/events/{bare['id']}", headers=headers)).status_code == 404
    again = await client.delete("/events/trial-started", headers=headers)
    assert again.status_code == 404 and again.json()["name"] == "not_found"


async def test_a_name_is_defined_once_per_team(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    mine = await define(client, tenant, "signup")
    twice = await client.post("/events", json={"name": "signup"}, headers=tenant.headers())
    assert twice.status_code == 409 and twice.json()["name"] == "conflict"
    assert "PATCH /events/signup" in twice.json()["message"]

    other = await make_tenant(services)
    for method, path in (("GET", mine["id"]), ("GET", "signup"), ("DELETE", mine["id"])):
        response = await client.request(method, f"/events/{path}", headers=other.headers())
        assert response.status_code == 404, (method, path)
    response = await client.patch(
        "/events/signup", json={"schema": {"x": "string"}}, headers=other.headers()
    )
    assert response.status_code == 404
    assert (await client.get("/events", headers=other.headers())).json()["data"] == []
    restricted = await client.get("/events/signup", headers=tenant.headers("sending"))
    assert restricted.status_code == 401 and restricted.json()["name"] == "restricted_api_key"
    theirs = await define(client, other, "signup", {"x": "number"})
    assert theirs["id"] != mine["id"]
    assert (await client.get("/events/signup", headers=tenant.headers())).json() == mine


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "'name'"),
        ({"name": ""}, "'name'"),
        ({"name": "has space"}, "'name'"),
        ({"name": "email.sent"}, "reserved"),
        ({"name": "stream"}, "path of the API"),
        ({"name": "send"}, "path of the API"),
        ({"name": "x", "schema": ["plan"]}, "'schema' must be an object"),
        ({"name": "x", "schema": {"plan": "text"}}, "'schema.plan'"),
        ({"name": "x", "schema": {"plan": {"type": "string"}}}, "flat"),
        ({"name": "x", "schema": {"": "string"}}, "field names"),
    ],
)
async def test_definitions_that_cannot_be_are_422(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any], named: str
) -> None:
    response = await client.post("/events", json=body, headers=tenant.headers())
    assert response.status_code == 422, response.text
    assert response.json()["name"] == "validation_error" and named in response.json()["message"]
    assert (await client.get("/events", headers=tenant.headers())).json()["data"] == []


async def test_a_bad_change_changes_nothing(client: httpx.AsyncClient, tenant: Tenant) -> None:
    paid = await define(client, tenant, "order.paid", SCHEMA)
    for body, named in (
        ({}, "'schema' is required"),
        ({"name": "order.refunded", "schema": None}, "cannot be changed"),
        ({"schema": {"seats": "integer"}}, "'schema.seats'"),
    ):
        response = await client.patch("/events/order.paid", json=body, headers=tenant.headers())
        assert response.status_code == 422 and named in response.json()["message"], response.text
    assert (await client.get("/events/order.paid", headers=tenant.headers())).json() == paid


async def send(client: httpx.AsyncClient, tenant: Tenant, event: str, **fields: Any) -> Any:
    body = {"event": event, "email": "ann@example.com", **fields}
    return await client.post("/events/send", json=body, headers=tenant.headers())


async def test_a_schema_checks_the_payloads_sent_for_its_event(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = tenant.headers()
    await define(client, tenant, "order.paid", SCHEMA)
    body = {"name": "A", "status": "enabled", "connections": [], "steps": [
        {"key": "start", "type": "trigger", "config": {"event": "order.paid"}},
    ]}  # fmt: skip
    automation = (await client.post("/automations", json=body, headers=headers)).json()
    for payload, named in (
        ({"plan": 3}, "'payload.plan' must be a string, got number"),
        ({"seats": "3"}, "'payload.seats' must be a number, got '3'"),
        ({"seats": True}, "'payload.seats' must be a number, got boolean"),
        ({"trial": "yes"}, "'payload.trial' must be a boolean"),
        ({"renews": "next week"}, "'payload.renews' must be a date (ISO 8601"),
        ({"renews": 1764201600}, "'payload.renews' must be a date"),
        ({"plan": "pro", "seats": [1]}, "'payload.seats'"),
    ):
        refused = await send(client, tenant, "order.paid", payload=payload)
        assert refused.status_code == 422, (payload, refused.text)
        assert named in refused.json()["message"] and "'order.paid'" in refused.json()["message"]
    # Nothing happened for the refused events: no contact made, no run started.
    assert (await client.get("/contacts/ann@example.com", headers=headers)).status_code == 404
    runs = f"/automations/{automation['id']}/runs"
    assert (await client.get(runs, headers=headers)).json()["data"] == []

    for payload in (
        {"plan": "pro", "seats": 3, "trial": False, "renews": "2026-12-01"},
        {"seats": 2.5, "renews": "2026-12-01T10:00:00Z", "coupon": {"any": "thing"}},
        {"plan": None},
        {},
    ):
        accepted = await send(client, tenant, "order.paid", payload=payload)
        assert accepted.status_code == 202, (payload, accepted.text)
    assert len((await client.get(runs, headers=headers)).json()["data"]) == 4

    # Undefined events, and a definition whose schema was cleared, take any payload.
    assert (await send(client, tenant, "order.shipped", payload={"plan": 3})).status_code == 202
    await client.patch("/events/order.paid", json={"schema": None}, headers=headers)
    assert (await send(client, tenant, "order.paid", payload={"plan": 3})).status_code == 202
    await client.patch("/events/order.paid", json={"schema": SCHEMA}, headers=headers)
    assert (await send(client, tenant, "order.paid", payload={"plan": 3})).status_code == 422
    await client.delete("/events/order.paid", headers=headers)
    assert (await send(client, tenant, "order.paid", payload={"plan": 3})).status_code == 202
