"""Resend's paging of lists (limit, after/before an item's id, has_more): templates, domains,
webhooks, API keys and emails, beside SPEC's full set (all but emails) and cursor and time
filters (emails)."""

from __future__ import annotations

import httpx
import pytest

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body
from tests.integration.test_api_emails import assert_error


async def _make(client: httpx.AsyncClient, tenant: Tenant, path: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        if path == "/templates":
            body = {"name": f"T{i}", "alias": f"t{i}", "subject": "s", "html": "<p>x</p>"}
        elif path == "/domains":
            body = {"name": f"d{i}.example.com"}
        elif path == "/webhooks":
            body = {"endpoint": f"https://93.184.216.34/h{i}", "events": ["email.sent"]}
        elif path == "/api-keys":
            body = {"name": f"k{i}"}
        else:
            body = email_body(subject=f"n{i}")
        response = await client.post(path, json=body, headers=tenant.headers())
        assert response.status_code in (200, 201), response.text
        ids.append(response.json()["id"])
    return ids


async def _page(client: httpx.AsyncClient, tenant: Tenant, url: str) -> tuple[list[str], bool]:
    response = await client.get(url, headers=tenant.headers())
    assert response.status_code == 200, response.text
    body = response.json()
    return [item["id"] for item in body["data"]], body["has_more"]


ALL = ["/templates", "/domains", "/webhooks", "/api-keys", "/emails"]
FULL_SETS = ["/templates", "/domains", "/webhooks", "/api-keys"]


async def _made(client: httpx.AsyncClient, tenant: Tenant, path: str, n: int) -> list[str]:
    """``n`` items of the list at ``path``, counting a tenant's own keys among API keys."""
    if path != "/api-keys":
        return await _make(client, tenant, path, n)
    ids, _ = await _page(client, tenant, path)
    return ids + await _make(client, tenant, path, n - len(ids))


@pytest.mark.parametrize("path", ALL)
async def test_pages_after_and_before_an_item(
    client: httpx.AsyncClient, tenant: Tenant, path: str
) -> None:
    made = await _made(client, tenant, path, 5)
    order, more = await _page(client, tenant, path)  # the full set (emails: its first page)
    assert sorted(order) == sorted(made) and more is False

    pages, after = [], ""
    while True:
        ids, more = await _page(client, tenant, f"{path}?limit=2{after}")
        pages.append((ids, more))
        if not more:
            break
        after = f"&after={ids[-1]}"
    assert pages == [(order[0:2], True), (order[2:4], True), (order[4:5], False)]

    assert await _page(client, tenant, f"{path}?limit=2&before={order[4]}") == (order[2:4], True)
    assert await _page(client, tenant, f"{path}?limit=2&before={order[2]}") == (order[0:2], False)
    assert await _page(client, tenant, f"{path}?limit=3&before={order[1]}") == (order[0:1], False)
    assert await _page(client, tenant, f"{path}?before={order[4]}") == (order[0:4], False)
    assert await _page(client, tenant, f"{path}?after={order[0]}") == (order[1:], False)
    assert await _page(client, tenant, f"{path}?limit=5") == (order, False)
    assert await _page(client, tenant, f"{path}?limit=4") == (order[:4], True)


@pytest.mark.parametrize("path", ALL)
async def test_another_teams_item_is_a_422(
    client: httpx.AsyncClient, tenant: Tenant, services: Services, path: str
) -> None:
    theirs = (await _make(client, tenant, path, 1))[0]
    other = await make_tenant(services)
    await _make(client, other, path, 1)
    for query in (
        f"after={theirs}",
        f"before={theirs}",
        f"limit=2&after={new_id()}",  # no such item anywhere: the same answer
        f"after={theirs.upper()}",
    ):
        response = await client.get(f"{path}?{query}", headers=other.headers())
        error = assert_error(response, 422, "validation_error")
        assert theirs not in error["message"].lower(), query
    both = await client.get(f"{path}?after={theirs}&before={theirs}", headers=tenant.headers())
    assert_error(both, 422, "validation_error")


@pytest.mark.parametrize("path", FULL_SETS)
async def test_a_limit_outside_1_to_100_is_a_page_of_20(
    client: httpx.AsyncClient, tenant: Tenant, path: str
) -> None:
    made = await _made(client, tenant, path, 1 if path != "/api-keys" else 4)
    for limit in ("0", "101", "x"):
        assert await _page(client, tenant, f"{path}?limit={limit}") == (made, False)
    assert await _page(client, tenant, f"{path}?after=") == (made, False)  # empty: full set


async def test_email_ids_beside_time_filters_and_cursors(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await _make(client, tenant, "/emails", 4)
    first = (await client.get("/emails?limit=2", headers=tenant.headers())).json()
    assert first["has_more"] is True and first["next_cursor"]
    order, _ = await _page(client, tenant, "/emails")
    cursor = first["next_cursor"]
    via_cursor = await _page(client, tenant, f"/emails?limit=2&cursor={cursor}")
    via_id = await _page(client, tenant, f"/emails?limit=2&after={order[1]}")
    assert via_cursor == via_id == (order[2:4], False)

    both = await client.get(f"/emails?cursor={cursor}&after={order[1]}", headers=tenant.headers())
    assert_error(both, 422, "validation_error")
    for value in ("yesterday", "0190d4c4", "2026-13-01T00:00:00Z"):
        bad = await client.get(f"/emails?after={value}", headers=tenant.headers())
        assert "RFC 3339" in assert_error(bad, 422, "validation_error")["message"]

    # a timestamp stays SPEC's filter, and combines with an id: emails after 1970, before order[1]
    ids, more = await _page(client, tenant, f"/emails?after=1970-01-01T00:00:00Z&before={order[2]}")
    assert (ids, more) == (order[0:2], False)
    before = (
        await client.get(f"/emails?limit=1&before={order[2]}", headers=tenant.headers())
    ).json()
    assert [e["id"] for e in before["data"]] == [order[1]] and before["has_more"] is True
    assert before["next_cursor"]  # leads on to older emails: order[2] and on
    rest, _ = await _page(client, tenant, f"/emails?cursor={before['next_cursor']}")
    assert rest == order[2:]


async def test_suppressions_take_after_beside_the_cursor_and_refuse_before(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    for i in range(3):
        response = await client.post(
            "/suppressions", json={"email": f"s{i}@example.com"}, headers=tenant.headers()
        )
        assert response.status_code == 201, response.text
    order, more = await _page(client, tenant, "/suppressions")
    assert len(order) == 3 and more is False
    first = (await client.get("/suppressions?limit=2", headers=tenant.headers())).json()
    assert [s["id"] for s in first["data"]] == order[:2] and first["has_more"] is True
    via_id = await _page(client, tenant, f"/suppressions?limit=2&after={order[1]}")
    via_cursor = await _page(client, tenant, f"/suppressions?cursor={first['next_cursor']}")
    assert via_id == via_cursor == (order[2:], False)

    other = await make_tenant(services)
    for url, headers in [
        (f"/suppressions?before={order[2]}", tenant.headers()),
        (f"/suppressions?after={order[1]}&cursor={first['next_cursor']}", tenant.headers()),
        (f"/suppressions?after={new_id()}", tenant.headers()),
        (f"/suppressions?after={order[1]}", other.headers()),
    ]:
        assert_error(await client.get(url, headers=headers), 422, "validation_error")
