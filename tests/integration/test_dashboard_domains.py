"""The dashboard's domain page against a real DNS server on loopback, on SQLite and PostgreSQL:
the verify button checks the records now, and the page shows each record's status."""

from __future__ import annotations

import dataclasses
import re

import httpx
import pytest

from posthaste.config import Settings
from tests.conftest import Tenant
from tests.dns_server import ZoneServer
from tests.integration.test_dashboard import csrf_of, sign_in
from tests.integration.test_domains import add_domain, publish, record_of


@pytest.fixture
def settings(settings: Settings, zone: ZoneServer) -> Settings:
    return dataclasses.replace(settings, dns_nameservers=zone.nameservers)


def record_statuses(page: httpx.Response) -> list[tuple[str, str]]:
    """(purpose, status) of each row of the page's DNS records table."""
    table = page.text.split('id="records"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(\w+)</td>.*?badge \w+\">(\w+)</span>", table, flags=re.S)
    return [(purpose, status) for purpose, status in rows]


async def test_verify_checks_the_records_and_the_page_shows_each_status(
    client: httpx.AsyncClient, tenant: Tenant, zone: ZoneServer
) -> None:
    domain = await add_domain(client, tenant)
    publish(zone, domain, skip="DKIM")
    assert (await sign_in(client, tenant.live)).status_code == 303
    path = f"/ui/domains/{domain['id']}"
    page = await client.get(path)
    assert {status for _, status in record_statuses(page)} == {"not_started"}

    verified = await client.post(f"{path}/verify", data={"csrf_token": csrf_of(page)})
    assert verified.status_code == 303 and verified.headers["location"] == f"{path}?notice=verified"
    page = await client.get(verified.headers["location"])
    assert "checked just now" in page.text
    statuses = dict(record_statuses(page))
    assert statuses["DKIM"] == "pending" and statuses["SPF"] == "verified"

    publish(zone, {"records": [record_of(domain, "DKIM", "TXT")]})
    await client.post(f"{path}/verify", data={"csrf_token": csrf_of(page)})
    page = await client.get(path)
    assert {status for _, status in record_statuses(page)} == {"verified"}
    assert '<span class="badge verified">verified</span>' in page.text.split("<h2>", 1)[0]
