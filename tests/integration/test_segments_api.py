"""/segments and contacts' memberships, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy import func, select

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from posthaste.storage.tables import segment_members
from tests.conftest import Tenant, make_tenant


async def segment(client: httpx.AsyncClient, tenant: Tenant, name: str = "Newsletter") -> str:
    response = await client.post("/segments", json={"name": name}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def contact(client: httpx.AsyncClient, tenant: Tenant, email: str, **body: object) -> str:
    response = await client.post(
        "/contacts", json={"email": email, **body}, headers=tenant.headers()
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["data"]]


async def test_create_get_rename_list_and_delete(client: httpx.AsyncClient, tenant: Tenant) -> None:
    created = await client.post("/segments", json={"name": " VIP "}, headers=tenant.headers())
    assert created.status_code == 201
    record = created.json()
    assert set(record) == {"object", "id", "name", "created_at"}
    assert record["object"] == "segment" and record["name"] == "VIP"
    got = await client.get(f"/segments/{record['id']}", headers=tenant.headers())
    assert got.json() == record
    renamed = await client.patch(
        f"/segments/{record['id']}", json={"name": "Gold"}, headers=tenant.headers()
    )
    assert renamed.json() == {**record, "name": "Gold"}
    second = await segment(client, tenant, "Second")
    assert ids(await client.get("/segments", headers=tenant.headers())) == [record["id"], second]
    paged = await client.get("/segments?limit=1", headers=tenant.headers())
    assert ids(paged) == [record["id"]] and paged.json()["has_more"] is True
    gone = await client.delete(f"/segments/{record['id']}", headers=tenant.headers())
    assert gone.json() == {"object": "segment", "id": record["id"], "deleted": True}
    assert (
        await client.get(f"/segments/{record['id']}", headers=tenant.headers())
    ).status_code == 404


async def test_bad_names_are_422(client: httpx.AsyncClient, tenant: Tenant) -> None:
    for body in ({}, {"name": ""}, {"name": "  "}, {"name": 5}, {"name": "x" * 201}):
        response = await client.post("/segments", json=body, headers=tenant.headers())
        assert response.status_code == 422 and "'name'" in response.json()["message"]
    assert (await client.get("/segments", headers=tenant.headers())).json()["data"] == []


async def test_membership_add_is_idempotent_and_lists_both_ways(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    news = await segment(client, tenant)
    vip = await segment(client, tenant, "VIP")
    ann = await contact(client, tenant, "ann@example.com")
    bob = await contact(client, tenant, "bob@example.com", segments=[{"id": news}])
    await contact(client, tenant, "cat@example.com")
    for ref in (ann, "ANN@example.com"):
        added = await client.post(f"/contacts/{ref}/segments/{news}", headers=tenant.headers())
        assert added.status_code == 200
        assert added.json()["id"] == news and added.json()["object"] == "segment"
    # Resend's SDK sends a body with the ids; it changes nothing
    await client.post(
        f"/contacts/{ann}/segments/{vip}", json={"segment_id": vip, "contact_id": ann},
        headers=tenant.headers(),
    )  # fmt: skip
    assert ids(await client.get(f"/segments/{news}/contacts", headers=tenant.headers())) == [
        ann,
        bob,
    ]
    assert ids(await client.get(f"/contacts?segment_id={news}", headers=tenant.headers())) == [
        ann,
        bob,
    ]
    assert ids(await client.get(f"/contacts/{ann}/segments", headers=tenant.headers())) == [
        news,
        vip,
    ]
    page = await client.get(f"/segments/{news}/contacts?limit=1", headers=tenant.headers())
    assert ids(page) == [ann] and page.json()["has_more"] is True
    page = await client.get(f"/contacts/{ann}/segments?after={news}", headers=tenant.headers())
    assert ids(page) == [vip] and page.json()["has_more"] is False

    removed = await client.delete(
        f"/contacts/ann@example.com/segments/{news}", headers=tenant.headers()
    )
    assert removed.json() == {"object": "segment", "id": news, "deleted": True}
    again = await client.delete(f"/contacts/{ann}/segments/{news}", headers=tenant.headers())
    assert again.status_code == 200
    assert ids(await client.get(f"/segments/{news}/contacts", headers=tenant.headers())) == [bob]


async def test_deleting_a_segment_leaves_its_contacts_and_deleting_a_contact_its_memberships(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    news = await segment(client, tenant)
    vip = await segment(client, tenant, "VIP")
    ann = await contact(client, tenant, "ann@example.com", segments=[news, vip])
    bob = await contact(client, tenant, "bob@example.com", segments=[news])
    await client.delete(f"/segments/{news}", headers=tenant.headers())
    assert ids(await client.get("/contacts", headers=tenant.headers())) == [ann, bob]
    assert ids(await client.get(f"/contacts/{ann}/segments", headers=tenant.headers())) == [vip]
    await client.delete(f"/contacts/{ann}", headers=tenant.headers())
    assert ids(await client.get(f"/segments/{vip}/contacts", headers=tenant.headers())) == []
    async with services.db.read() as tx:
        count = select(func.count()).select_from(segment_members)
        assert (await tx.conn.execute(count)).scalar_one() == 0


async def test_unknown_and_other_teams_segments_and_contacts_are_404(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    news = await segment(client, tenant)
    ann = await contact(client, tenant, "ann@example.com")
    other = await make_tenant(services)
    theirs = await contact(client, other, "ann@example.com")
    for method, path in [
        ("GET", f"/segments/{news}"),
        ("PATCH", f"/segments/{news}"),
        ("DELETE", f"/segments/{news}"),
        ("GET", f"/segments/{news}/contacts"),
        ("GET", f"/contacts?segment_id={news}"),
        ("GET", "/contacts?segment_id=nonsense"),
        ("GET", f"/segments/{new_id()}"),
        ("GET", "/segments/not-a-uuid"),
        ("POST", f"/contacts/{theirs}/segments/{news}"),
        ("DELETE", f"/contacts/{theirs}/segments/{news}"),
        ("POST", f"/contacts/{ann}/segments/{new_id()}"),
        ("GET", f"/contacts/{ann}/segments"),
    ]:
        answer = await client.request(method, path, json={"name": "x"}, headers=other.headers())
        if path.startswith(f"/contacts/{ann}/segments/"):
            answer = await client.request(method, path, headers=tenant.headers())
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["name"] == "not_found"
    # the other team's contact never joined this team's segment
    assert ids(await client.get(f"/segments/{news}/contacts", headers=tenant.headers())) == []
    # a page anchored on another team's segment is refused
    page = await client.get(f"/segments?after={news}", headers=other.headers())
    assert page.status_code == 422


async def test_concurrent_adds_make_one_membership(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    news = await segment(client, tenant)
    ann = await contact(client, tenant, "ann@example.com")
    answers = await asyncio.gather(
        *(
            client.post(f"/contacts/{ref}/segments/{news}", headers=tenant.headers())
            for ref in (ann, "ann@example.com", ann, "ANN@example.com", ann)
        )
    )
    assert [a.status_code for a in answers] == [200] * 5
    assert ids(await client.get(f"/segments/{news}/contacts", headers=tenant.headers())) == [ann]
