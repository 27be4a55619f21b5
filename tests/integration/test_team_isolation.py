"""Another team's ids answer 404 ``not_found`` on every GET-by-id route of ``/openapi.json``,
exactly like ids that do not exist (PRODUCT: a key of team A never sees team B's resources).

Team A makes one record of every kind through the API; team B asks for each with A's ids. The
routes are read from the document, so a new GET-by-id route fails this test until it is covered
here (or named in ``NOT_COVERED`` with the reason).
"""

from __future__ import annotations

import base64
import re
from typing import Any

import httpx

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body
from tests.integration.test_automations_api import graph

# Routes whose records team A cannot make through the API alone in this test.
NOT_COVERED = {
    # Received mail arrives over SMTP (the inbound server), not through the API.
    "/emails/received/{email_id}",
    "/emails/receiving/{email_id}",
    "/emails/received/{email_id}/attachments",
    "/emails/receiving/{email_id}/attachments",
    "/emails/received/{email_id}/attachments/{attachment_id}",
    "/emails/receiving/{email_id}/attachments/{attachment_id}",
    "/emails/received/{email_id}/raw",
    "/emails/receiving/{email_id}/raw",
}

# Routes where team A's own request is a 404 too in this test: the raw message is built when
# sending starts (no worker runs here); A started no domain claim; A's webhook has delivered
# nothing; A's automation has no run.
A_HAS_NONE = {
    "/domains/{domain_id}/claim",
    "/emails/{email_id}/raw",
    "/webhooks/{webhook_id}/events/{event_id}",
    "/webhooks/{webhook_id}/events/{event_id}/attempts",
    "/automations/{automation_id}/runs/{run_id}",
}


async def _made(client: httpx.AsyncClient, a: Tenant, path: str, body: Any) -> dict[str, Any]:
    response = await client.post(path, json=body, headers=a.headers())
    assert response.status_code in (200, 201), f"{path}: {response.text}"
    made: dict[str, Any] = response.json()
    return made


async def _records_of(client: httpx.AsyncClient, a: Tenant) -> dict[str, str]:
    """One record of every kind for team A: path parameter name → A's value."""
    pdf = base64.b64encode(b"%PDF-1.4").decode()
    email = await _made(
        client,
        a,
        "/emails",
        email_body(attachments=[{"filename": "a.pdf", "content": pdf}]),
    )
    attachments = await client.get(f"/emails/{email['id']}/attachments", headers=a.headers())
    segment = await _made(client, a, "/segments", {"name": "Readers"})
    topic = await _made(client, a, "/topics", {"name": "News", "default_subscription": "opt_in"})
    contact = await _made(client, a, "/contacts", {"email": "ann@example.com"})
    suppression = await _made(client, a, "/suppressions", {"email": "gone@example.com"})
    template = await _made(
        client, a, "/templates", {"name": "Welcome", "subject": "Hi", "html": "<p>Hi</p>"}
    )
    domain = await _made(client, a, "/domains", {"name": "isolated.example.com"})
    webhook = await _made(
        client, a, "/webhooks", {"endpoint": "https://93.184.216.34/h", "events": ["email.sent"]}
    )
    stream = await _made(client, a, "/streams", {"name": "Receipts", "type": "transactional"})
    broadcast = await _made(
        client,
        a,
        "/broadcasts",
        {"segment_id": segment["id"], "from": "news@acme.test", "subject": "S", "html": "<p/>"},
    )
    automation = await _made(client, a, "/automations", {"name": "Flow", **graph(segment["id"])})
    definition = await _made(client, a, "/events", {"name": "order.paid"})
    imported = await client.post(
        "/contacts/imports",
        content=b"email\nbob@example.com\n",
        headers={**a.headers(), "Content-Type": "text/csv"},
    )
    assert imported.status_code == 202, imported.text
    return {
        "email_id": email["id"],
        "attachment_id": attachments.json()["data"][0]["id"],
        "segment_id": segment["id"],
        "topic_id": topic["id"],
        "contact_id": contact["id"],
        "id_or_email": contact["id"],
        "suppression": suppression["id"],
        "template_id": template["id"],
        "domain_id": domain["id"],
        "webhook_id": webhook["id"],
        # A's webhook has delivered nothing yet: an event id of A's own (its email's first).
        "event_id": (await client.get(f"/emails/{email['id']}/events", headers=a.headers())).json()[
            "data"
        ][0]["id"],
        "stream_id": stream["id"],
        "broadcast_id": broadcast["id"],
        "automation_id": automation["id"],
        "run_id": new_id(),  # under A's automation: B must not learn that it exists either
        "event_ref": definition["id"],
        "import_id": imported.json()["id"],
    }


def _get_by_id_paths(document: dict[str, Any]) -> list[str]:
    return [
        path
        for path, operations in document["paths"].items()
        if "{" in path and "get" in operations and operations["get"].get("security") != []
    ]


async def test_another_teams_ids_are_not_found_on_every_get_by_id_route(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    ids = await _records_of(client, tenant)
    b = await make_tenant(services)
    document = (await client.get("/openapi.json")).json()
    paths = _get_by_id_paths(document)
    assert set(paths) >= NOT_COVERED, "a NOT_COVERED route left the document"
    checked = []
    for template in paths:
        if template in NOT_COVERED:
            continue
        names = re.findall(r"{(\w+)}", template)
        assert set(names) <= set(ids), f"{template}: make a record of team A for {names}"
        values = {name: ids[name] for name in names}
        if template.startswith("/suppressions/"):
            values["id_or_email"] = ids["suppression"]
        url = template.format(**values)
        own = await client.get(url, headers=tenant.headers())
        assert own.status_code == 200 or template in A_HAS_NONE, f"A's own {url}: {own.text}"
        answer = await client.get(url, headers=b.headers())
        assert answer.status_code == 404, f"B got {url}: {answer.status_code} {answer.text}"
        # Word for word what an id that exists nowhere gets: nothing tells B that A's does.
        fresh = {name: new_id() for name in names}
        unknown = await client.get(template.format(**fresh), headers=b.headers())
        said = answer.json()["message"]
        for name in names:
            said = said.replace(values[name], fresh[name])
        assert (answer.json()["name"], said) == ("not_found", unknown.json()["message"]), url
        checked.append(template)
    assert len(checked) >= 30, checked


async def test_another_teams_contact_and_suppression_by_address_are_not_found(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    await _made(client, tenant, "/contacts", {"email": "ann@example.com"})
    await _made(client, tenant, "/suppressions", {"email": "gone@example.com"})
    b = await make_tenant(services)
    for url in ("/contacts/ann@example.com", "/suppressions/gone@example.com"):
        assert (await client.get(url, headers=tenant.headers())).status_code == 200, url
        answer = await client.get(url, headers=b.headers())
        assert answer.status_code == 404 and answer.json()["name"] == "not_found", answer.text
