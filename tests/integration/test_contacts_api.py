"""/contacts: create, read by id or address, edit, delete, lists, events, bad input and team
isolation, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from posthaste.bootstrap import Services
from posthaste.core.contacts import Contact
from posthaste.core.ids import new_id
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import segments as segments_repo
from posthaste.storage.tables import contacts
from tests.conftest import Tenant, make_tenant
from tests.helpers import events_of

T0 = 1_767_225_600_000


async def create(
    client: httpx.AsyncClient, tenant: Tenant, email: str = "ann@example.com", **body: Any
) -> httpx.Response:
    return await client.post("/contacts", json={"email": email, **body}, headers=tenant.headers())


async def contact_count(services: Services) -> int:
    async with services.db.read() as tx:
        return int((await tx.conn.execute(select(func.count()).select_from(contacts))).scalar_one())


async def test_create_then_read_by_id_and_by_address_in_any_case(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await create(
        client, tenant, "Ann.Lee@Example.COM", first_name="Ann", last_name="Lee",
        properties={"plan": "pro", "seats": 3, "score": 4.5},
    )  # fmt: skip
    assert response.status_code == 201
    created = response.json()
    assert created["object"] == "contact"
    assert created["email"] == "Ann.Lee@example.com"
    assert (created["first_name"], created["last_name"]) == ("Ann", "Lee")
    assert created["unsubscribed"] is False
    assert created["properties"] == {"plan": "pro", "seats": 3, "score": 4.5}
    assert created["created_at"] == created["updated_at"]
    for ref in (created["id"], "ann.lee@example.com", "ANN.LEE@EXAMPLE.COM", created["id"].upper()):
        got = await client.get(f"/contacts/{ref}", headers=tenant.headers())
        assert got.status_code == 200, ref
        assert got.json() == created


async def test_an_idn_address_is_one_contact_in_either_form(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    created = (await create(client, tenant, "jürgen@bücher.example")).json()
    assert created["email"] == "jürgen@xn--bcher-kva.example"
    got = await client.get("/contacts/JÜRGEN@xn--bcher-kva.example", headers=tenant.headers())
    assert got.status_code == 200 and got.json()["id"] == created["id"]
    again = await create(client, tenant, "jürgen@BÜCHER.example")
    assert again.status_code == 409


async def test_the_same_address_twice_is_a_conflict_and_nothing_is_stored(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    assert (await create(client, tenant)).status_code == 201
    again = await create(client, tenant, "ANN@example.com", first_name="Other")
    assert again.status_code == 409
    assert again.json()["name"] == "conflict"
    assert await contact_count(services) == 1
    other = await make_tenant(services)
    assert (await create(client, other)).status_code == 201  # unique per team only


async def test_patch_merges_properties_and_records_one_event_per_change(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    created = (await create(client, tenant, properties={"plan": "free", "city": "Oslo"})).json()
    url = f"/contacts/{created['id']}"
    patched = await client.patch(
        url,
        json={
            "first_name": "Ann",
            "unsubscribed": True,
            "properties": {"plan": "pro", "city": None},
        },
        headers=tenant.headers(),
    )
    assert patched.status_code == 200
    body = patched.json()
    assert body["first_name"] == "Ann" and body["unsubscribed"] is True
    assert body["properties"] == {"plan": "pro"}
    assert body["updated_at"] >= created["updated_at"]
    same = await client.patch(url, json={"first_name": "Ann"}, headers=tenant.headers())
    assert same.json() == body
    cleared = await client.patch(
        "/contacts/ann@example.com", json={"properties": None, "first_name": None},
        headers=tenant.headers(),
    )  # fmt: skip
    assert cleared.json()["properties"] == {} and cleared.json()["first_name"] is None
    async with services.db.read() as tx:
        created_events = await events_of(tx, tenant.team.id, "contact.created")
        updated_events = await events_of(tx, tenant.team.id, "contact.updated")
    assert created_events == [created]
    assert updated_events == [body, cleared.json()]


async def test_patch_changes_the_address_unless_another_contact_has_it(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    ann = (await create(client, tenant)).json()
    await create(client, tenant, "bob@example.com")
    taken = await client.patch(
        f"/contacts/{ann['id']}", json={"email": "BOB@example.com"}, headers=tenant.headers()
    )
    assert taken.status_code == 409
    moved = await client.patch(
        f"/contacts/{ann['id']}", json={"email": "ann@new.example"}, headers=tenant.headers()
    )
    assert moved.json()["email"] == "ann@new.example"
    assert (
        await client.get("/contacts/ann@example.com", headers=tenant.headers())
    ).status_code == 404


async def test_delete_by_address_records_the_event_and_answers_404_after(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    created = (await create(client, tenant)).json()
    gone = await client.delete("/contacts/Ann@Example.com", headers=tenant.headers())
    assert gone.status_code == 200
    assert gone.json() == {"object": "contact", "id": created["id"], "deleted": True}
    for method in ("GET", "PATCH", "DELETE"):
        again = await client.request(
            method, f"/contacts/{created['id']}", json={}, headers=tenant.headers()
        )
        assert again.status_code == 404 and again.json()["name"] == "not_found"
    async with services.db.read() as tx:
        assert await events_of(tx, tenant.team.id, "contact.deleted") == [created]


async def test_another_teams_contact_is_not_found(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    created = (await create(client, tenant)).json()
    other = await make_tenant(services)
    for ref in (created["id"], "ann@example.com", new_id(), "not-an-address", "%20"):
        for method in ("GET", "PATCH", "DELETE"):
            answer = await client.request(
                method, f"/contacts/{ref}", json={"first_name": "X"}, headers=other.headers()
            )
            assert answer.status_code == 404, (method, ref)
    assert (
        await client.get(f"/contacts/{created['id']}", headers=tenant.headers())
    ).json() == created
    listed = (await client.get("/contacts", headers=other.headers())).json()
    assert listed == {"object": "list", "data": [], "has_more": False}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "'email'"),
        ({"email": 42}, "'email'"),
        ({"email": "not an address"}, "'email'"),
        ({"email": "Ann <ann@example.com>"}, "bare address"),
        ({"email": "ann@example.com\r\nBcc: x@evil.example"}, "'email'"),
        ({"email": "ann@example.com", "first_name": "Ann\r\nBcc: x"}, "'first_name'"),
        ({"email": "ann@example.com", "last_name": 7}, "'last_name'"),
        ({"email": "ann@example.com", "first_name": "x" * 201}, "'first_name'"),
        ({"email": "ann@example.com", "unsubscribed": "yes"}, "'unsubscribed'"),
        ({"email": "ann@example.com", "properties": []}, "'properties'"),
        ({"email": "ann@example.com", "properties": {"ok": {"nested": 1}}}, "'properties.ok'"),
        ({"email": "ann@example.com", "properties": {"flag": True}}, "'properties.flag'"),
        ({"email": "ann@example.com", "properties": {"list": [1]}}, "'properties.list'"),
        # A null value removes a key in a PATCH; on create it means nothing (found by the
        # coverage phase of tests/e2e/test_fuzz_api.py: it was dropped without a word).
        ({"email": "ann@example.com", "properties": {"gone": None}}, "'properties.gone'"),
        ({"email": "ann@example.com", "properties": {"long": "x" * 2001}}, "'properties.long'"),
        ({"email": "ann@example.com", "properties": {"bad key": "x"}}, "'bad key'"),
        ({"email": "ann@example.com", "properties": {"k" * 65: "x"}}, "Property key"),
        ({"email": "ann@example.com", "properties": {f"k{i}": i for i in range(51)}}, "50 keys"),
        ({"email": "ann@example.com", "segments": "x"}, "'segments'"),
        ({"email": "ann@example.com", "segments": [new_id()]}, "not one of your segments"),
        ({"email": "ann@example.com", "topics": [{"id": new_id()}]}, "subscription"),
        (
            {"email": "ann@example.com", "topics": [{"id": new_id(), "subscription": "opt_in"}]},
            "not one of your topics",
        ),
    ],
)
async def test_bad_input_is_a_422_naming_the_field_and_stores_nothing(
    client: httpx.AsyncClient, tenant: Tenant, services: Services, body: Any, named: str
) -> None:
    response = await client.post("/contacts", json=body, headers=tenant.headers())
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["name"] == "validation_error" and error["statusCode"] == 422
    assert named in error["message"]
    assert await contact_count(services) == 0


@pytest.mark.parametrize("raw", [b"{", b"", b"[1]", b'"ann@example.com"', b"\xff\xfe"])
async def test_malformed_bodies_are_422(
    client: httpx.AsyncClient, tenant: Tenant, raw: bytes
) -> None:
    headers = {**tenant.headers(), "Content-Type": "application/json"}
    response = await client.post("/contacts", content=raw, headers=headers)
    assert response.status_code == 422
    created = (await create(client, tenant)).json()
    patched = await client.patch(f"/contacts/{created['id']}", content=raw, headers=headers)
    assert patched.status_code == 422
    await client.delete(f"/contacts/{created['id']}", headers=tenant.headers())


async def test_patch_refuses_bad_properties_and_keeps_the_contact(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    created = (await create(client, tenant, properties={"plan": "pro"})).json()
    bad = await client.patch(
        f"/contacts/{created['id']}",
        json={"first_name": "New", "properties": {"nested": {"a": 1}}},
        headers=tenant.headers(),
    )
    assert bad.status_code == 422 and "'properties.nested'" in bad.json()["message"]
    got = await client.get(f"/contacts/{created['id']}", headers=tenant.headers())
    assert got.json() == created


async def test_the_full_list_streams_every_contact_oldest_first_and_pages_on_request(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    ids = [(await create(client, tenant, f"c{i}@example.com")).json()["id"] for i in range(7)]
    full = await client.get("/contacts", headers=tenant.headers())
    assert full.status_code == 200
    assert [c["id"] for c in full.json()["data"]] == ids and full.json()["has_more"] is False
    first = (await client.get("/contacts?limit=3", headers=tenant.headers())).json()
    assert [c["id"] for c in first["data"]] == ids[:3] and first["has_more"] is True
    after = (await client.get(f"/contacts?limit=3&after={ids[2]}", headers=tenant.headers())).json()
    assert [c["id"] for c in after["data"]] == ids[3:6] and after["has_more"] is True
    before = await client.get(f"/contacts?limit=3&before={ids[6]}", headers=tenant.headers())
    assert [c["id"] for c in before.json()["data"]] == ids[3:6]
    last = (await client.get(f"/contacts?after={ids[5]}&limit=5", headers=tenant.headers())).json()
    assert [c["id"] for c in last["data"]] == ids[6:] and last["has_more"] is False
    unknown = await client.get(f"/contacts?after={new_id()}", headers=tenant.headers())
    assert unknown.status_code == 422
    both = await client.get(f"/contacts?after={ids[0]}&before={ids[1]}", headers=tenant.headers())
    assert both.status_code == 422


async def test_contact_events_reach_webhook_endpoints(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    hook = await client.post(
        "/webhooks",
        json={
            "endpoint": "https://93.184.216.34/hooks",  # public, never contacted here
            "events": ["contact.created", "contact.updated", "contact.deleted"],
        },
        headers=tenant.headers(),
    )
    assert hook.status_code == 201
    created = (await create(client, tenant)).json()
    updated = await client.patch(
        f"/contacts/{created['id']}", json={"unsubscribed": True}, headers=tenant.headers()
    )
    await client.delete(f"/contacts/{created['id']}", headers=tenant.headers())
    events = await client.get(f"/webhooks/{hook.json()['id']}/events", headers=tenant.headers())
    delivered = {e["type"]: e["payload"]["data"] for e in events.json()["data"]}
    assert delivered == {
        "contact.created": created,
        "contact.updated": updated.json(),
        "contact.deleted": updated.json(),
    }


async def test_a_large_list_streams_whole_and_in_order(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    """More rows than one database fetch and more bytes than one response chunk."""
    segment_id = (
        await client.post("/segments", json={"name": "Half"}, headers=tenant.headers())
    ).json()["id"]
    made = []
    async with services.db.transaction() as tx:
        for i in range(1500):
            at = T0 + i
            item = Contact(
                new_id(), tenant.team.id, f"c{i}@example.com", f"c{i}@example.com",
                f"Name {i}", None, False, {"n": i}, at, at,
            )  # fmt: skip
            assert await contacts_repo.insert_contact(tx, item)
            if i % 2:
                await segments_repo.add_members(tx, tenant.team.id, item.id, [segment_id], at)
            made.append(item.id)
    full = await client.get("/contacts", headers=tenant.headers())
    assert [c["id"] for c in full.json()["data"]] == made
    members = await client.get(f"/segments/{segment_id}/contacts", headers=tenant.headers())
    assert [c["id"] for c in members.json()["data"]] == made[1::2]


async def test_concurrent_creates_of_one_address_store_one_contact(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    answers = await asyncio.gather(
        *(create(client, tenant, f"{case}@example.com") for case in ("ann", "ANN", "Ann", "aNN"))
    )
    assert sorted(a.status_code for a in answers) == [201, 409, 409, 409]
    assert await contact_count(services) == 1
    async with services.db.read() as tx:
        assert len(await events_of(tx, tenant.team.id, "contact.created")) == 1


@pytest.mark.parametrize(
    "ref", ["ann%0D%0A@example.com", "ann@example.com%0D%0ABcc:x", "%00", "ann@@example.com"]
)
async def test_odd_references_in_the_path_are_404(
    client: httpx.AsyncClient, tenant: Tenant, ref: str
) -> None:
    await create(client, tenant)
    answer = await client.get(f"/contacts/{ref}", headers=tenant.headers())
    assert answer.status_code == 404 and answer.json()["name"] == "not_found"
