"""The dashboard's received mail pages over a message the inbound server really stored, on
SQLite and PostgreSQL: what they show, the html's policy, and another team's 404."""

from __future__ import annotations

from email import policy
from typing import Any

import httpx

from posthaste.bootstrap import Services
from tests.conftest import Tenant, make_tenant
from tests.integration.test_dashboard import sign_in
from tests.integration.test_inbound import Mx, multipart, send

# The inbound tests' fixtures: a loopback DNS zone in the settings, the MX, a receiving domain.
from tests.integration.test_inbound import mx as mx
from tests.integration.test_inbound import receiving as receiving
from tests.integration.test_inbound import settings as settings


async def test_received_mail_pages(
    services: Services,
    mx: Mx,
    client: httpx.AsyncClient,
    tenant: Tenant,
    receiving: dict[str, Any],
) -> None:
    code, reply = await send(mx, multipart().as_bytes(policy=policy.SMTP), ["support@acme.test"])
    assert code == 250, reply
    received_id = reply.decode().rsplit(" ", 1)[-1]
    assert (await sign_in(client, tenant.live)).status_code == 303
    listing = await client.get("/ui/received")
    assert "Réclamation: commande n° 42 ☃" in listing.text and received_id in listing.text
    page = await client.get(f"/ui/received/{received_id}")
    assert page.status_code == 200
    for shown in ("jurgen@example.org", "support@acme.test", "voici la facture", "facture-été.pdf"):
        assert shown in page.text, shown
    framed = await client.get(f"/ui/received/{received_id}/html")
    assert framed.text.startswith("<p>Bonjour")
    assert "sandbox" in framed.headers["content-security-policy"]

    other = await make_tenant(services)
    client.cookies.clear()
    assert (await sign_in(client, other.live)).status_code == 303
    assert received_id not in (await client.get("/ui/received")).text
    for path in (f"/ui/received/{received_id}", f"/ui/received/{received_id}/html"):
        assert (await client.get(path)).status_code == 404, path
