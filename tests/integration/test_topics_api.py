"""/topics and contacts' topic choices, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from tests.conftest import Tenant, make_tenant


async def topic(
    client: httpx.AsyncClient, tenant: Tenant, name: str, default: str, **body: Any
) -> dict[str, Any]:
    response = await client.post(
        "/topics", json={"name": name, "default_subscription": default, **body},
        headers=tenant.headers(),
    )  # fmt: skip
    assert response.status_code == 201, response.text
    return dict(response.json())


def subscriptions(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 200, response.text
    return {item["name"]: item["subscription"] for item in response.json()["data"]}


async def test_create_get_edit_list_and_delete(client: httpx.AsyncClient, tenant: Tenant) -> None:
    news = await topic(client, tenant, "News", "opt_in", description="Monthly")
    assert news["object"] == "topic" and news["description"] == "Monthly"
    assert news["default_subscription"] == "opt_in"
    assert (await client.get(f"/topics/{news['id']}", headers=tenant.headers())).json() == news
    edited = await client.patch(
        f"/topics/{news['id']}", json={"name": "Newsletter", "description": None},
        headers=tenant.headers(),
    )  # fmt: skip
    assert edited.status_code == 200
    assert edited.json()["name"] == "Newsletter" and edited.json()["description"] is None
    offers = await topic(client, tenant, "Offers", "opt_out")
    listed = (await client.get("/topics", headers=tenant.headers())).json()
    assert [t["id"] for t in listed["data"]] == [news["id"], offers["id"]]
    assert listed["has_more"] is False
    page = (await client.get("/topics?limit=1", headers=tenant.headers())).json()
    assert [t["id"] for t in page["data"]] == [news["id"]] and page["has_more"] is True
    gone = await client.delete(f"/topics/{offers['id']}", headers=tenant.headers())
    assert gone.json() == {"object": "topic", "id": offers["id"], "deleted": True}
    assert (
        await client.get(f"/topics/{offers['id']}", headers=tenant.headers())
    ).status_code == 404


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"name": "News"}, "'default_subscription'"),
        ({"name": "News", "default_subscription": "maybe"}, "'default_subscription'"),
        ({"default_subscription": "opt_in"}, "'name'"),
        ({"name": "x" * 201, "default_subscription": "opt_in"}, "'name'"),
        ({"name": "N", "default_subscription": "opt_in", "description": 3}, "'description'"),
    ],
)
async def test_bad_topics_are_422(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any], named: str
) -> None:
    response = await client.post("/topics", json=body, headers=tenant.headers())
    assert response.status_code == 422 and named in response.json()["message"]


async def test_the_default_subscription_cannot_change(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    news = await topic(client, tenant, "News", "opt_in")
    refused = await client.patch(
        f"/topics/{news['id']}", json={"default_subscription": "opt_out"}, headers=tenant.headers()
    )
    assert refused.status_code == 422


async def test_effective_subscription_is_the_choice_else_the_default(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    news = await topic(client, tenant, "News", "opt_in")
    offers = await topic(client, tenant, "Offers", "opt_out")
    beta = await topic(client, tenant, "Beta", "opt_out")
    created = await client.post(
        "/contacts",
        json={"email": "ann@example.com", "topics": [{"id": beta["id"], "subscription": "opt_in"}]},
        headers=tenant.headers(),
    )
    ann = created.json()["id"]
    url = f"/contacts/{ann}/topics"
    listed = await client.get(url, headers=tenant.headers())
    assert subscriptions(listed) == {"News": "opt_in", "Offers": "opt_out", "Beta": "opt_in"}
    assert listed.json()["id"] == ann
    # Resend's SDK sends the bare array; ours is {"topics": [...]}
    patched = await client.patch(
        "/contacts/ANN@example.com/topics",
        json=[{"id": news["id"], "subscription": "opt_out"}],
        headers=tenant.headers(),
    )
    assert subscriptions(patched) == {"News": "opt_out", "Offers": "opt_out", "Beta": "opt_in"}
    patched = await client.patch(
        url, json={"topics": [{"id": offers["id"], "subscription": "opt_in"}]},
        headers=tenant.headers(),
    )  # fmt: skip
    assert subscriptions(patched) == {"News": "opt_out", "Offers": "opt_in", "Beta": "opt_in"}
    await client.delete(f"/topics/{offers['id']}", headers=tenant.headers())
    assert subscriptions(await client.get(url, headers=tenant.headers())) == {
        "News": "opt_out",
        "Beta": "opt_in",
    }
    page = await client.get(f"{url}?limit=1&after={news['id']}", headers=tenant.headers())
    assert subscriptions(page) == {"Beta": "opt_in"} and page.json()["has_more"] is False


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"topics": "x"},
        [{"id": "nope", "subscription": "opt_in"}],
        [{"subscription": "opt_in"}],
        [{"id": new_id(), "subscription": "yes"}],
        [{"id": new_id(), "subscription": "opt_in"}],
        ["opt_in"],
    ],
)
async def test_bad_choices_are_422_and_change_nothing(
    client: httpx.AsyncClient, tenant: Tenant, body: Any
) -> None:
    news = await topic(client, tenant, "News", "opt_in")
    created = await client.post(
        "/contacts", json={"email": "a@example.com"}, headers=tenant.headers()
    )
    url = f"/contacts/{created.json()['id']}/topics"
    mixed = body if not isinstance(body, list) else [
        {"id": news["id"], "subscription": "opt_out"}, *body
    ]  # fmt: skip
    response = await client.patch(url, json=mixed, headers=tenant.headers())
    assert response.status_code == 422, response.text
    assert subscriptions(await client.get(url, headers=tenant.headers())) == {"News": "opt_in"}


async def test_other_teams_topics_and_contacts_are_404(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    news = await topic(client, tenant, "News", "opt_in")
    created = await client.post(
        "/contacts", json={"email": "a@example.com"}, headers=tenant.headers()
    )
    ann = created.json()["id"]
    other = await make_tenant(services)
    for method, path in [
        ("GET", f"/topics/{news['id']}"),
        ("PATCH", f"/topics/{news['id']}"),
        ("DELETE", f"/topics/{news['id']}"),
        ("GET", "/topics/not-a-uuid"),
        ("GET", f"/contacts/{ann}/topics"),
        ("PATCH", f"/contacts/{ann}/topics"),
    ]:
        answer = await client.request(
            method, path, json={"name": "x", "topics": []}, headers=other.headers()
        )
        assert answer.status_code == 404, (method, path)
    theirs = await client.post(
        "/contacts", json={"email": "a@example.com"}, headers=other.headers()
    )
    choice = [{"id": news["id"], "subscription": "opt_out"}]
    refused = await client.patch(
        f"/contacts/{theirs.json()['id']}/topics", json=choice, headers=other.headers()
    )
    assert refused.status_code == 422 and "not one of your topics" in refused.json()["message"]
