"""Suppressing and removing several addresses in one call: `POST /suppressions` with a list,
and Resend's `/suppressions/batch/add|remove`; all or nothing, events recorded; both
databases."""

from __future__ import annotations

import httpx

from posthaste.bootstrap import Services
from tests.conftest import Tenant, make_tenant


async def _events(services: Services, tenant: Tenant) -> list[str]:
    from sqlalchemy import select

    from posthaste.storage.tables import events

    async with services.db.read() as tx:
        rows = await tx.conn.execute(
            select(events.c.type).where(events.c.team_id == tenant.team.id).order_by(events.c.id)
        )
        return [r.type for r in rows]


async def test_a_list_in_post_suppressions(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    one = await client.post(
        "/suppressions", json={"email": "a@example.com"}, headers=tenant.headers()
    )
    assert one.status_code == 201 and one.json()["object"] == "suppression"
    for body in (
        {"emails": ["B@Example.com", "c@bücher.de", "a@example.com"]},
        ["d@example.com", {"email": "e@example.com"}, "d@example.com"],
    ):
        answer = await client.post("/suppressions", json=body, headers=tenant.headers())
        assert answer.status_code == 201, answer.text
        assert answer.json()["object"] == "list"
    listed = await client.get("/suppressions", params={"limit": "100"}, headers=tenant.headers())
    emails = sorted(s["email"] for s in listed.json()["data"])
    assert emails == [
        "a@example.com",
        "b@example.com",
        "c@xn--bcher-kva.de",
        "d@example.com",
        "e@example.com",
    ]
    # One event per new entry; the address already listed and the repeat add nothing.
    assert (await _events(services, tenant)).count("suppression.added") == 5


async def test_one_bad_entry_stores_nothing(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    for path, body, where in (
        ("/suppressions", {"emails": ["ok@example.com", "not an address"]}, "emails[1]"),
        ("/suppressions", ["ok@example.com", 7], "[1]"),
        (
            "/suppressions/batch/add",
            {"emails": ["ok@example.com", "x@\r\nexample.com"]},
            "emails[1]",
        ),
    ):
        answer = await client.post(path, json=body, headers=tenant.headers())
        assert answer.status_code == 422 and answer.json()["name"] == "validation_error"
        assert where in answer.json()["message"]
    for body in ({"emails": []}, {"emails": "a@example.com"}, [], {"emails": ["a@x.com"] * 1001}):
        answer = await client.post("/suppressions", json=body, headers=tenant.headers())
        assert answer.status_code == 422, body
    listed = await client.get("/suppressions", headers=tenant.headers())
    assert listed.json()["data"] == []
    assert await _events(services, tenant) == []


async def test_batch_remove_by_address_or_id_is_scoped_and_idempotent(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    added = await client.post(
        "/suppressions/batch/add",
        json={"emails": ["a@example.com", "b@example.com", "c@example.com"]},
        headers=tenant.headers(),
    )
    assert added.status_code == 201
    ids = [s["id"] for s in added.json()["data"]]
    other = await make_tenant(services)
    theirs = await client.post(
        "/suppressions/batch/remove", json={"ids": ids}, headers=other.headers()
    )
    assert theirs.status_code == 200 and theirs.json()["data"] == []  # another team's: none
    removed = await client.post(
        "/suppressions/batch/remove",
        json={"emails": ["A@example.com", "nobody@example.com"]},
        headers=tenant.headers(),
    )
    assert removed.json()["data"] == [{"object": "suppression", "id": ids[0], "deleted": True}]
    by_id = await client.post(
        "/suppressions/batch/remove", json={"ids": ids[1:] + ids[1:]}, headers=tenant.headers()
    )
    assert [r["id"] for r in by_id.json()["data"]] == ids[1:]
    again = await client.post(
        "/suppressions/batch/remove", json={"ids": ids}, headers=tenant.headers()
    )
    assert again.json()["data"] == []
    for body in ({}, {"emails": ["a@example.com"], "ids": ids}, {"ids": []}, {"ids": [1]}):
        bad = await client.post("/suppressions/batch/remove", json=body, headers=tenant.headers())
        assert bad.status_code == 422, body
    assert (await _events(services, tenant)).count("suppression.removed") == 3
