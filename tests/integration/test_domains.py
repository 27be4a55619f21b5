"""/domains end to end against a real DNS server on loopback: records, verification, re-checks."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from typing import Any

import dkim
import dns.nameserver
import dns.resolver
import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import select

from posthaste.adapters.dns import Resolver
from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.crypto import SecretBox
from posthaste.core.domains import GRACE_MS, HOUR_MS
from posthaste.core.ids import now_ms
from posthaste.core.jobs import JobKind
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import tables
from tests.conftest import Tenant, make_tenant
from tests.dns_server import ZoneServer
from tests.helpers import email_body


@pytest.fixture
def settings(settings: Settings, zone: ZoneServer) -> Settings:
    return dataclasses.replace(
        settings,
        dns_nameservers=zone.nameservers,
        mx_host="mx.posthaste.test",
        spf_include="_spf.posthaste.test",
        region_mx_host={"eu-west-1": "mx.eu.posthaste.test"},
    )


class Clock:
    """A clock the test moves by hand (the 72 h rule without waiting)."""

    def __init__(self) -> None:
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now


async def add_domain(
    client: httpx.AsyncClient, tenant: Tenant, name: str = "acme.test", **fields: Any
) -> dict[str, Any]:
    response = await client.post(
        "/domains", json={"name": name, **fields}, headers=tenant.headers("live")
    )
    assert response.status_code == 201, response.text
    domain: dict[str, Any] = response.json()
    return domain


def publish(zone: ZoneServer, domain: dict[str, Any], *, skip: str | None = None) -> None:
    """Publish the records exactly as the API returned them (a DNS console splits long TXT)."""
    for record in domain["records"]:
        if record["record"] == skip:
            continue
        if record["type"] == "TXT":
            zone.add(record["name"], "TXT", record["value"])
        else:
            zone.add(record["name"], "MX", (record["priority"], record["value"]))


def record_of(domain: dict[str, Any], kind: str, rtype: str) -> dict[str, Any]:
    [record] = [r for r in domain["records"] if r["record"] == kind and r["type"] == rtype]
    return record


async def verify(client: httpx.AsyncClient, tenant: Tenant, domain_id: str) -> dict[str, Any]:
    response = await client.post(f"/domains/{domain_id}/verify", headers=tenant.headers("live"))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def send(client: httpx.AsyncClient, tenant: Tenant, sender: str = "hi@acme.test") -> Any:
    return await client.post(
        "/emails", json=email_body(**{"from": sender}), headers=tenant.headers("live")
    )


async def domain_events(services: Services, team_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with services.db.read() as tx:
        query = (
            select(tables.events.c.type, tables.events.c.data)
            .where(tables.events.c.team_id == team_id, tables.events.c.type.like("domain.%"))
            .order_by(tables.events.c.id)
        )
        return [(row.type, row.data) for row in await tx.conn.execute(query)]


async def test_create_answers_the_records_to_publish(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    domain = await add_domain(client, tenant, "Acme.TEST.", region="eu-west-1", receiving=True)
    assert domain["name"] == "acme.test"
    assert domain["status"] == "not_started" and domain["region"] == "eu-west-1"
    dkim = record_of(domain, "DKIM", "TXT")
    selector, _, rest = dkim["name"].partition("._domainkey.")
    assert rest == "acme.test" and selector.startswith("ph")
    public = serialization.load_der_public_key(base64.b64decode(dkim["value"].split("p=")[1]))
    assert isinstance(public, rsa.RSAPublicKey) and public.key_size == 2048
    assert "".join(part.strip('"') for part in dkim["zone_value"].split('" "')) == dkim["value"]
    assert record_of(domain, "SPF", "MX") | {"status": "x"} == {
        "record": "SPF",
        "type": "MX",
        "name": "send.acme.test",
        "value": "mx.eu.posthaste.test",
        "zone_value": "10 mx.eu.posthaste.test.",
        "priority": 10,
        "ttl": 3600,
        "status": "x",
    }
    assert record_of(domain, "SPF", "TXT")["value"] == "v=spf1 include:_spf.posthaste.test ~all"
    assert record_of(domain, "DMARC", "TXT")["name"] == "_dmarc.acme.test"
    assert record_of(domain, "Receiving", "MX")["name"] == "acme.test"
    assert {r["status"] for r in domain["records"]} == {"not_started"}
    [(kind, data)] = await domain_events(services, tenant.team.id)
    assert kind == "domain.created" and data == domain


async def test_the_private_key_is_encrypted_at_rest(
    client: httpx.AsyncClient, tenant: Tenant, services: Services, settings: Settings
) -> None:
    domain = await add_domain(client, tenant)
    async with services.db.read() as tx:
        stored = (
            await tx.conn.execute(
                select(tables.domains.c.dkim_private_key).where(tables.domains.c.id == domain["id"])
            )
        ).scalar_one()
    assert stored.startswith("v1.") and b"PRIVATE KEY" not in stored.encode()
    pem = SecretBox(settings.secret_key, "dkim-key").decrypt(stored)
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    published = record_of(domain, "DKIM", "TXT")["value"].split("p=")[1]
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert base64.b64encode(der).decode() == published
    assert "dkim_private_key" not in str(await domain_events(services, tenant.team.id))


async def test_regions_are_listed_and_unknown_ones_refused(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.get("/domains/regions", headers=tenant.headers())
    assert response.json()["data"][:2] == [
        {"name": "us-east-1", "default": True},
        {"name": "eu-west-1", "default": False},
    ]
    response = await client.post(
        "/domains", json={"name": "acme.test", "region": "mars-1"}, headers=tenant.headers()
    )
    assert response.status_code == 422
    assert (
        response.json()["name"] == "validation_error" and "us-east-1" in response.json()["message"]
    )


@pytest.mark.parametrize("bad", ["192.0.2.1", "localhost", "example", "a" * 64 + ".com", 7, None])
async def test_bad_names_are_422_and_store_nothing(
    client: httpx.AsyncClient, tenant: Tenant, bad: object
) -> None:
    response = await client.post("/domains", json={"name": bad}, headers=tenant.headers())
    assert response.status_code == 422 and response.json()["name"] == "validation_error"
    assert (await client.get("/domains", headers=tenant.headers())).json()["data"] == []


async def test_a_team_cannot_add_a_name_twice_but_another_team_can(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    await add_domain(client, tenant)
    again = await client.post("/domains", json={"name": "ACME.test"}, headers=tenant.headers())
    assert again.status_code == 409 and again.json()["name"] == "conflict"
    other = await make_tenant(services)
    await add_domain(client, other)
    listed = (await client.get("/domains", headers=tenant.headers())).json()["data"]
    assert [d["name"] for d in listed] == ["acme.test"]


async def test_published_records_verify_and_a_live_key_can_send(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer
) -> None:
    domain = await add_domain(client, tenant, region="eu-west-1")
    refused = await send(client, tenant)
    assert refused.status_code == 403 and refused.json()["name"] == "domain_not_verified"
    publish(zone, domain, skip="DMARC")
    verified = await verify(client, tenant, domain["id"])
    assert verified["status"] == "verified"
    assert {r["record"]: r["status"] for r in verified["records"]} == {
        "DKIM": "verified",
        "SPF": "verified",
        "DMARC": "pending",
    }
    sent = await send(client, tenant)
    assert sent.status_code == 200, sent.text
    assert sent.json()["region"] == "eu-west-1"
    fetched = await client.get(f"/domains/{domain['id']}", headers=tenant.headers())
    assert fetched.json()["status"] == "verified"


async def test_a_partly_published_domain_is_pending_and_rechecked(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    domain = await add_domain(client, tenant)
    publish(zone, domain, skip="DKIM")
    pending = await verify(client, tenant, domain["id"])
    assert pending["status"] == "pending"
    assert record_of(pending, "DKIM", "TXT")["status"] == "pending"
    assert record_of(pending, "SPF", "TXT")["status"] == "verified"
    publish(zone, {"records": [record_of(domain, "DKIM", "TXT")]})
    await run_domain_checks(services, domain["id"])
    fetched = await client.get(f"/domains/{domain['id']}", headers=tenant.headers())
    assert fetched.json()["status"] == "verified"


async def run_domain_checks(services: Services, domain_id: str) -> None:
    """Make the domain's pending check due now and let a real worker run it."""
    async with services.db.transaction() as tx:
        assert await jobs_repo.move(tx, JobKind.CHECK_DOMAIN, domain_id, 0) == 1
    assert await services.make_worker().run_until_idle() >= 1


async def check_job_due_in(services: Services, domain_id: str) -> int:
    async with services.db.read() as tx:
        query = select(tables.jobs.c.available_at).where(
            tables.jobs.c.kind == JobKind.CHECK_DOMAIN, tables.jobs.c.ref == domain_id
        )
        [due] = (await tx.conn.execute(query)).scalars().all()
    return int(due)


async def test_a_vanished_record_is_a_temporary_failure_then_failed_after_72_hours(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    clock = Clock()
    services.domains.clock = clock
    domain = await add_domain(client, tenant)
    publish(zone, domain)
    await verify(client, tenant, domain["id"])
    assert await check_job_due_in(services, domain["id"]) == clock.now + 24 * HOUR_MS
    zone.remove(record_of(domain, "DKIM", "TXT")["name"])
    clock.now += 24 * HOUR_MS
    await run_domain_checks(services, domain["id"])
    fetched = (await client.get(f"/domains/{domain['id']}", headers=tenant.headers())).json()
    assert fetched["status"] == "temporary_failure"
    assert record_of(fetched, "DKIM", "TXT")["status"] == "temporary_failure"
    assert (await send(client, tenant)).status_code == 200  # still usable in the grace period
    clock.now += GRACE_MS
    await run_domain_checks(services, domain["id"])
    fetched = (await client.get(f"/domains/{domain['id']}", headers=tenant.headers())).json()
    assert fetched["status"] == "failed"
    assert record_of(fetched, "DKIM", "TXT")["status"] == "failed"
    refused = await send(client, tenant)
    assert refused.status_code == 403 and refused.json()["name"] == "domain_not_verified"
    async with services.db.read() as tx:
        assert await jobs_repo.next_due_at(tx, [JobKind.CHECK_DOMAIN]) is None  # no more re-checks
    kinds = [kind for kind, _ in await domain_events(services, tenant.team.id)]
    assert kinds == ["domain.created"] + ["domain.updated"] * 3


async def test_a_silent_dns_server_is_a_temporary_failure_never_an_error(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    services.domains.resolver = Resolver(zone.nameservers, timeout=0.3)
    domain = await add_domain(client, tenant)
    zone.silent = True
    result = await verify(client, tenant, domain["id"])
    assert result["status"] == "temporary_failure"
    assert {r["status"] for r in result["records"]} == {"temporary_failure"}
    assert await check_job_due_in(services, domain["id"]) > now_ms()


async def test_another_teams_domain_is_not_found(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    domain = await add_domain(client, tenant)
    other = await make_tenant(services)
    path = f"/domains/{domain['id']}"
    for method, suffix, body in [
        ("GET", "", None),
        ("PATCH", "", {"open_tracking": True}),
        ("DELETE", "", None),
        ("POST", "/verify", None),
        ("POST", "/claim", None),
        ("POST", "/claim/confirm", None),
        ("POST", "/claim/release", None),
    ]:
        response = await client.request(
            method, path + suffix, json=body, headers=other.headers("live")
        )
        assert response.status_code == 404, (method, suffix)
        assert response.json()["name"] == "not_found"
    missing = await client.get("/domains/nope", headers=other.headers())
    assert missing.json()["message"] == response.json()["message"].replace(domain["id"], "nope")
    assert (await client.get(path, headers=tenant.headers())).status_code == 200


async def test_patch_changes_settings_and_receiving_adds_its_record(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    domain = await add_domain(client, tenant)
    path = f"/domains/{domain['id']}"
    response = await client.patch(
        path,
        json={"open_tracking": True, "tls": "enforced", "receiving": True},
        headers=tenant.headers(),
    )
    assert response.status_code == 200
    changed = response.json()
    assert changed["open_tracking"] is True and changed["tls"] == "enforced"
    assert record_of(changed, "Receiving", "MX")["value"] == "mx.posthaste.test"
    off = (await client.patch(path, json={"receiving": False}, headers=tenant.headers())).json()
    assert [r["record"] for r in off["records"]] == ["DKIM", "SPF", "SPF", "DMARC"]
    for bad in ({"tls": "maybe"}, {"click_tracking": "yes"}, {"nothing": 1}, []):
        response = await client.patch(path, json=bad, headers=tenant.headers())
        assert response.status_code == 422, bad
    kinds = [kind for kind, _ in await domain_events(services, tenant.team.id)]
    assert kinds == ["domain.created", "domain.updated", "domain.updated"]


async def test_delete_removes_the_domain(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    domain = await add_domain(client, tenant)
    response = await client.delete(f"/domains/{domain['id']}", headers=tenant.headers())
    assert response.json() == {"object": "domain", "id": domain["id"], "deleted": True}
    assert (
        await client.get(f"/domains/{domain['id']}", headers=tenant.headers())
    ).status_code == 404
    events = await domain_events(services, tenant.team.id)
    assert events[-1][0] == "domain.deleted" and events[-1][1]["id"] == domain["id"]
    await add_domain(client, tenant)  # the name is free again


async def test_signing_key_is_the_verified_domains_key(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    domain = await add_domain(client, tenant)
    assert await services.domains.signing_key(tenant.team.id, "acme.test") is None
    publish(zone, domain)
    await verify(client, tenant, domain["id"])
    key = await services.domains.signing_key(tenant.team.id, "ACME.test")
    assert key is not None
    assert (key.domain, key.selector) == ("acme.test", domain["records"][0]["name"].split(".")[0])
    assert key.private_key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    other = await make_tenant(services)
    assert await services.domains.signing_key(other.team.id, "acme.test") is None
    found = await services.domains.sending_domain(tenant.team.id, "Acme.test")
    assert found is not None and (found.id, found.tls) == (domain["id"], "opportunistic")
    assert await services.domains.sending_domain(other.team.id, "acme.test") is None


async def test_mail_signed_with_the_key_verifies_against_the_published_record(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer, services: Services
) -> None:
    domain = await add_domain(client, tenant)
    publish(zone, domain)
    await verify(client, tenant, domain["id"])
    key = await services.domains.signing_key(tenant.team.id, "acme.test")
    assert key is not None
    message = b"From: hello@acme.test\r\nTo: user@example.com\r\nSubject: Hi\r\n\r\nHello.\r\n"
    signature = dkim.sign(
        message,
        key.selector.encode(),
        key.domain.encode(),
        key.private_key_pem,
        canonicalize=(b"relaxed", b"relaxed"),
        include_headers=[b"from", b"to", b"subject"],
    )
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = [dns.nameserver.Do53Nameserver(*zone.nameservers[0])]

    def published_txt(name: bytes, timeout: int = 5) -> bytes:
        answer = resolver.resolve(name.decode().rstrip("."), "TXT")
        return b"".join(answer[0].strings)

    loop = asyncio.get_running_loop()
    signed = signature + message
    assert await loop.run_in_executor(None, lambda: dkim.verify(signed, dnsfunc=published_txt))


async def test_domains_are_documented_and_need_a_full_access_key(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in (
        "/domains",
        "/domains/regions",
        "/domains/{domain_id}",
        "/domains/{domain_id}/verify",
        "/domains/{domain_id}/claim",
        "/domains/{domain_id}/claim/confirm",
        "/domains/{domain_id}/claim/release",
    ):
        assert path in paths
    refused = await client.get("/domains", headers=tenant.headers("sending"))
    assert refused.status_code == 401 and refused.json()["name"] == "restricted_api_key"


async def test_two_racing_creates_of_one_name_give_one_domain_and_a_conflict(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    responses = await asyncio.gather(
        *(
            client.post("/domains", json={"name": "race.test"}, headers=tenant.headers())
            for _ in range(2)
        )
    )
    assert sorted(r.status_code for r in responses) == [201, 409]
    listed = (await client.get("/domains", headers=tenant.headers())).json()["data"]
    assert [d["name"] for d in listed] == ["race.test"]
