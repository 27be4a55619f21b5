"""Who may send from a name (PRODUCT §7): first verifier, claims, test keys, restricted keys."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from posthaste.bootstrap import Services
from posthaste.config import Settings
from tests.conftest import Tenant, make_tenant
from tests.dns_server import ZoneServer
from tests.helpers import email_body
from tests.integration.test_domains import add_domain, domain_events, publish, send, verify


@pytest.fixture
def settings(settings: Settings, zone: ZoneServer) -> Settings:
    return dataclasses.replace(settings, dns_nameservers=zone.nameservers)


async def verified_domain(
    client: httpx.AsyncClient,
    zone: ZoneServer,
    tenant: Tenant,
    name: str = "acme.test",
    **fields: Any,
) -> dict[str, Any]:
    domain = await add_domain(client, tenant, name, **fields)
    publish(zone, domain)
    assert (await verify(client, tenant, domain["id"]))["status"] == "verified"
    return domain


def refused_as(response: httpx.Response, name: str) -> bool:
    return response.status_code == 403 and response.json()["name"] == name


async def claim(client: httpx.AsyncClient, tenant: Tenant, domain_id: str, step: str = "") -> Any:
    return await client.post(f"/domains/{domain_id}/claim{step}", headers=tenant.headers("live"))


async def test_first_verifier_owns_and_a_claim_moves_ownership_and_back(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    first, second = await make_tenant(services), await make_tenant(services)
    await verified_domain(client, zone, first)
    later = await verified_domain(client, zone, second)
    assert (await send(client, first)).status_code == 200
    refused = await send(client, second)
    assert refused_as(refused, "domain_not_owned")
    assert "claim" in refused.json()["message"]

    challenge = (await claim(client, second, later["id"])).json()
    assert challenge["status"] == "pending"
    record = challenge["record"]
    assert record["type"] == "TXT" and record["name"] == "_posthaste-claim.acme.test"
    assert record["value"].startswith("posthaste-claim=")
    assert (await claim(client, second, later["id"])).json()["record"] == record  # stable
    absent = await claim(client, second, later["id"], "/confirm")
    assert absent.status_code == 422 and record["name"] in absent.json()["message"]
    assert refused_as(await send(client, second), "domain_not_owned")

    zone.add(record["name"], "TXT", record["value"])
    confirmed = await claim(client, second, later["id"], "/confirm")
    assert confirmed.status_code == 200 and confirmed.json()["claimed"] is True
    assert (await send(client, second)).status_code == 200
    assert refused_as(await send(client, first), "domain_not_owned")

    released = await claim(client, second, later["id"], "/release")
    assert released.status_code == 200 and released.json()["claimed"] is False
    assert (await send(client, first)).status_code == 200
    assert refused_as(await send(client, second), "domain_not_owned")
    again = await claim(client, second, later["id"], "/release")
    assert again.status_code == 409 and again.json()["name"] == "conflict"


async def test_a_claim_owns_the_name_before_verifying_but_sending_needs_verification(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    owner, claimant = await make_tenant(services), await make_tenant(services)
    await verified_domain(client, zone, owner)
    domain = await add_domain(client, claimant)
    record = (await claim(client, claimant, domain["id"])).json()["record"]
    zone.add(record["name"], "TXT", record["value"])
    assert (await claim(client, claimant, domain["id"], "/confirm")).status_code == 200
    assert refused_as(await send(client, owner), "domain_not_owned")
    assert refused_as(await send(client, claimant), "domain_not_verified")
    publish(zone, domain)
    assert (await verify(client, claimant, domain["id"]))["status"] == "verified"
    assert (await send(client, claimant)).status_code == 200


async def test_resends_claim_paths(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    owner, claimant = await make_tenant(services), await make_tenant(services)
    await verified_domain(client, zone, owner)
    headers = claimant.headers("live")
    started = await client.post(
        "/domains/claim", json={"name": "ACME.test", "region": "eu-west-1"}, headers=headers
    )
    assert started.status_code == 200
    challenge = started.json()
    assert (challenge["object"], challenge["name"], challenge["region"]) == (
        "domain_claim",
        "acme.test",
        "eu-west-1",
    )
    assert challenge["status"] == "pending"
    domain = (await client.get(f"/domains/{challenge['domain_id']}", headers=headers)).json()
    assert domain["name"] == "acme.test" and domain["region"] == "eu-west-1"  # added by the claim
    state = await client.get(f"/domains/{domain['id']}/claim", headers=headers)
    assert state.status_code == 200 and state.json() == challenge
    absent = await client.post(f"/domains/{domain['id']}/claim/verify", headers=headers)
    assert absent.status_code == 422 and absent.json()["name"] == "validation_error"

    zone.add(challenge["record"]["name"], "TXT", challenge["record"]["value"])
    verified = await client.post(f"/domains/{domain['id']}/claim/verify", headers=headers)
    assert verified.status_code == 200
    assert verified.json() == {**challenge, "status": "claimed"}
    assert refused_as(await send(client, owner), "domain_not_owned")
    # The same name again: the team's domain, not a second one.
    again = await client.post("/domains/claim", json={"name": "acme.test"}, headers=headers)
    assert again.json()["domain_id"] == domain["id"] and again.json()["status"] == "claimed"
    listed = (await client.get("/domains", headers=headers)).json()["data"]
    assert [d["id"] for d in listed] == [domain["id"]]


async def test_resends_claim_paths_refuse_what_the_others_refuse(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = tenant.headers()
    bad_name = await client.post("/domains/claim", json={"name": "not a name"}, headers=headers)
    assert bad_name.status_code == 422 and bad_name.json()["name"] == "validation_error"
    domain = await add_domain(client, tenant)
    unstarted = await client.get(f"/domains/{domain['id']}/claim", headers=headers)
    assert unstarted.status_code == 404 and "/claim" in unstarted.json()["message"]
    verify_first = await client.post(f"/domains/{domain['id']}/claim/verify", headers=headers)
    assert verify_first.status_code == 409
    other = await client.get("/domains/0190d4c4-0000-7000-8000-000000000000/claim", headers=headers)
    assert other.status_code == 404 and other.json()["name"] == "not_found"


async def test_confirming_without_a_challenge_is_a_conflict(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    domain = await add_domain(client, tenant)
    response = await claim(client, tenant, domain["id"], "/confirm")
    assert response.status_code == 409 and "/claim" in response.json()["message"]


async def test_a_later_claim_takes_the_name_from_an_earlier_claimant(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    first, second = await make_tenant(services), await make_tenant(services)
    one = await verified_domain(client, zone, first)
    two = await verified_domain(client, zone, second)
    for tenant, domain in ((first, one), (second, two)):
        record = (await claim(client, tenant, domain["id"])).json()["record"]
        zone.add(record["name"], "TXT", record["value"])
        assert (await claim(client, tenant, domain["id"], "/confirm")).status_code == 200
    assert (await client.get(f"/domains/{one['id']}", headers=first.headers())).json()[
        "claimed"
    ] is False
    assert (await send(client, second)).status_code == 200
    assert refused_as(await send(client, first), "domain_not_owned")


async def test_deleting_the_claimed_domain_ends_the_claim(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    first, second = await make_tenant(services), await make_tenant(services)
    await verified_domain(client, zone, first)
    two = await verified_domain(client, zone, second)
    record = (await claim(client, second, two["id"])).json()["record"]
    zone.add(record["name"], "TXT", record["value"])
    await claim(client, second, two["id"], "/confirm")
    assert refused_as(await send(client, first), "domain_not_owned")
    await client.delete(f"/domains/{two['id']}", headers=second.headers())
    assert (await send(client, first)).status_code == 200


async def test_test_keys_send_from_any_domain_in_the_verified_domains_region(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    other = await make_tenant(services)
    await verified_domain(client, zone, other, "owned.test")
    await verified_domain(client, zone, tenant, region="sa-east-1")
    for sender, region in (
        ("a@acme.test", "sa-east-1"),
        ("a@owned.test", "us-east-1"),
        ("a@nowhere.test", "us-east-1"),
    ):
        response = await client.post(
            "/emails", json=email_body(**{"from": sender}), headers=tenant.headers("test")
        )
        assert response.status_code == 200 and response.json()["region"] == region


async def test_batch_items_get_the_same_rule_as_item_errors(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    other = await make_tenant(services)
    await verified_domain(client, zone, other, "theirs.test")
    await verified_domain(client, zone, tenant)
    items = [
        email_body(**{"from": sender})
        for sender in ["a@acme.test", "b@theirs.test", "c@unknown.test"] + ["d@acme.test"] * 97
    ]
    response = await client.post("/emails/batch", json=items, headers=tenant.headers("live"))
    data = response.json()["data"]
    assert response.status_code == 200 and len(data) == 100
    assert "id" in data[0] and "id" in data[3] and "id" in data[99]
    assert data[1]["error"]["name"] == "domain_not_owned"
    assert data[2]["error"]["name"] == "domain_not_verified"


async def create_key(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> httpx.Response:
    return await client.post(
        "/api-keys", json={"name": "restricted", **fields}, headers=tenant.headers("live")
    )


async def test_keys_restricted_to_a_domain_send_only_from_it(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    acme = await verified_domain(client, zone, tenant)
    await verified_domain(client, zone, tenant, "other.test")
    created = await create_key(client, tenant, domain_id=acme["id"], mode="live")
    assert created.status_code == 201 and created.json()["domain_id"] == acme["id"]
    restricted = {"Authorization": f"Bearer {created.json()['token']}"}
    listed = (await client.get("/api-keys", headers=tenant.headers())).json()["data"]
    assert {k["domain_id"] for k in listed} == {None, acme["id"]}
    ok = await client.post("/emails", json=email_body(), headers=restricted)
    assert ok.status_code == 200
    refused = await client.post(
        "/emails", json=email_body(**{"from": "a@other.test"}), headers=restricted
    )
    assert refused_as(refused, "domain_not_owned")
    assert "only from 'acme.test'" in refused.json()["message"]
    test_key = await create_key(client, tenant, domain_id=acme["id"], mode="test")
    refused = await client.post(
        "/emails",
        json=email_body(**{"from": "a@other.test"}),
        headers={"Authorization": f"Bearer {test_key.json()['token']}"},
    )
    assert refused_as(refused, "domain_not_owned")
    await client.delete(f"/domains/{acme['id']}", headers=tenant.headers())
    gone = await client.post("/emails", json=email_body(), headers=restricted)
    assert refused_as(gone, "domain_not_owned") and "deleted" in gone.json()["message"]


async def test_a_key_for_someone_elses_or_no_domain_is_422(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    other = await make_tenant(services)
    theirs = await add_domain(client, other)
    for domain_id in (theirs["id"], "missing", 12):
        response = await create_key(client, tenant, domain_id=domain_id)
        assert response.status_code == 422 and response.json()["name"] == "validation_error"
    assert len((await client.get("/api-keys", headers=tenant.headers())).json()["data"]) == 3


async def test_the_team_that_loses_a_claim_gets_a_domain_updated_event(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    first, second = await make_tenant(services), await make_tenant(services)
    one, two = await add_domain(client, first), await add_domain(client, second)
    for tenant, domain in ((first, one), (second, two)):
        record = (await claim(client, tenant, domain["id"])).json()["record"]
        zone.add(record["name"], "TXT", record["value"])
        await claim(client, tenant, domain["id"], "/confirm")
    events = await domain_events(services, first.team.id)
    assert [(kind, data["claimed"]) for kind, data in events] == [
        ("domain.created", False),
        ("domain.updated", True),
        ("domain.updated", False),
    ]


async def test_a_batch_asks_about_each_domain_once(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    await verified_domain(client, zone, tenant)
    await verified_domain(client, zone, tenant, "other.test")
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        statements.append(sql)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        items = [
            email_body(**{"from": f"n{i}@{'acme' if i % 2 else 'other'}.test"}) for i in range(100)
        ]
        response = await client.post("/emails/batch", json=items, headers=tenant.headers("live"))
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert all("id" in entry for entry in response.json()["data"])
    domain_queries = [s for s in statements if "FROM domains" in s or "FROM domain_claims" in s]
    assert len(domain_queries) <= 2 * 3  # per distinct domain: the team's, the claim, the first


async def test_two_teams_confirming_at_once_leave_exactly_one_claimant(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    tenants = [await make_tenant(services) for _ in range(2)]
    domains = [await verified_domain(client, zone, tenant) for tenant in tenants]
    for tenant, domain in zip(tenants, domains, strict=True):
        record = (await claim(client, tenant, domain["id"])).json()["record"]
        zone.add(record["name"], "TXT", record["value"])
    confirmed = await asyncio.gather(
        *(
            claim(client, tenant, domain["id"], "/confirm")
            for tenant, domain in zip(tenants, domains, strict=True)
        )
    )
    assert [response.status_code for response in confirmed] == [200, 200]
    claimed = [
        (await client.get(f"/domains/{d['id']}", headers=t.headers())).json()["claimed"]
        for t, d in zip(tenants, domains, strict=True)
    ]
    assert sorted(claimed) == [False, True]
    sends = [(await send(client, tenant)).status_code for tenant in tenants]
    assert sorted(sends) == [200, 403]


async def test_refusals_name_the_domain_id_to_call(
    client: httpx.AsyncClient, services: Services, zone: ZoneServer
) -> None:
    owner, stranger, claimant = [await make_tenant(services) for _ in range(3)]
    await verified_domain(client, zone, owner)
    # No entry of its own for the name: how to make one, then claim it.
    unlisted = await send(client, stranger)
    assert refused_as(unlisted, "domain_not_owned")
    message = unlisted.json()["message"]
    assert "POST /domains and claim it (POST /domains/<its id>/claim)" in message
    assert "{" not in message
    # Its own (unverified) entry: the exact claim call.
    entry = await add_domain(client, claimant)
    listed = await send(client, claimant)
    assert refused_as(listed, "domain_not_owned")
    assert f"(POST /domains/{entry['id']}/claim)" in listed.json()["message"]
    assert "{" not in listed.json()["message"]


async def test_not_verified_names_the_verify_call(
    client: httpx.AsyncClient, services: Services
) -> None:
    unlisted, pending = await make_tenant(services), await make_tenant(services)
    refused = await send(client, unlisted)
    assert refused_as(refused, "domain_not_verified")
    assert "Add it with POST /domains" in refused.json()["message"]
    domain = await add_domain(client, pending)
    refused = await send(client, pending)
    assert refused_as(refused, "domain_not_verified")
    message = refused.json()["message"]
    assert f"call POST /domains/{domain['id']}/verify," in message and "{" not in message
