"""Remembered sender answers: a domain deleted or lost stops being accepted once the change
is heard, in this process at commit and in every other process by NOTIFY."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.addresses import parse_address
from posthaste.errors import DomainNotVerified
from posthaste.services.senders import DomainSenders
from posthaste.storage.database import DOMAINS_CHANNEL, Tx
from posthaste.storage.dialects import SqliteDialect
from tests.conftest import Tenant
from tests.dns_server import ZoneServer
from tests.integration.test_domain_ownership import refused_as, verified_domain
from tests.integration.test_domains import send


@pytest.fixture
def settings(settings: Settings, zone: ZoneServer) -> Settings:
    return dataclasses.replace(settings, dns_nameservers=zone.nameservers)


async def test_a_deleted_domain_is_refused_at_once_in_this_process(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer
) -> None:
    domain = await verified_domain(client, zone, tenant)
    assert (await send(client, tenant)).status_code == 200  # the answer is remembered now
    assert (await send(client, tenant)).status_code == 200
    deleted = await client.delete(f"/domains/{domain['id']}", headers=tenant.headers("live"))
    assert deleted.status_code == 200
    assert refused_as(await send(client, tenant), "domain_not_verified")


async def test_a_refusal_is_forgotten_once_the_domain_is_verified(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer
) -> None:
    assert refused_as(await send(client, tenant), "domain_not_verified")  # remembered
    await verified_domain(client, zone, tenant)
    assert (await send(client, tenant)).status_code == 200


@pytest.mark.parametrize("backend", ["postgres"])  # SQLite serves one process: no fleet
async def test_a_domain_deleted_by_another_process_is_refused_once_heard(
    client: httpx.AsyncClient,
    tenant: Tenant,
    zone: ZoneServer,
    services: Services,
    settings: Settings,
) -> None:
    domain = await verified_domain(client, zone, tenant)
    assert (await send(client, tenant)).status_code == 200  # remembered by `services`
    other = build_services(settings)  # another API or relay process
    heard = asyncio.Event()
    services.db.add_listener(DOMAINS_CHANNEL, heard.set)
    try:
        principal = await other.api_keys.authenticate(tenant.live)
        await other.domains.delete(principal, domain["id"])
        await asyncio.wait_for(heard.wait(), 5)
    finally:
        await other.close()
    assert refused_as(await send(client, tenant), "domain_not_verified")


class _Tx(Tx):
    def __init__(self) -> None:
        super().__init__(conn=None, dialect=SqliteDialect())  # type: ignore[arg-type]


async def test_an_answer_read_while_a_change_was_heard_is_not_kept(
    services: Services, tenant: Tenant
) -> None:
    """The query may have read the state from before the change: asked again, ask again."""
    principal = await services.api_keys.authenticate(tenant.live)
    senders = DomainSenders(services.db, "us-east-1")
    asked: list[str] = []

    async def decide(tx: Tx, _sender: object, name: str) -> str:
        asked.append(name)
        if len(asked) == 1:
            senders.forget()  # a change was heard while this query ran
        raise DomainNotVerified(f"{name} is not verified")

    senders._decide = decide  # type: ignore[method-assign]
    from_ = parse_address("hi@acme.test", "from")
    for tx in (_Tx(), _Tx(), _Tx()):
        with pytest.raises(DomainNotVerified, match=r"acme\.test is not verified"):
            await senders.region_for(tx, principal.sender, from_)
    assert asked == ["acme.test", "acme.test"]  # the second answer is kept, the first was not
