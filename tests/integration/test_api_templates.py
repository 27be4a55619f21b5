"""The templates API over HTTP (in-process ASGI), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from posthaste.bootstrap import Services
from posthaste.storage import tables
from tests.conftest import Tenant, make_tenant
from tests.integration.test_api_emails import assert_error

WELCOME: dict[str, Any] = {
    "name": "Welcome",
    "alias": "welcome",
    "subject": "Welcome, {{ first_name }}",
    "html": "<p>Hi {{ first_name }}, your plan is {{ plan.name }}.</p>",
    "text": "Hi {{ first_name }}",
    "variables": [{"key": "plan.name", "fallback_value": "Free"}],
}


async def create(client: httpx.AsyncClient, tenant: Tenant, **overrides: Any) -> dict[str, Any]:
    response = await client.post(
        "/templates", json={**WELCOME, **overrides}, headers=tenant.headers()
    )
    assert response.status_code == 201, response.text
    record: dict[str, Any] = response.json()
    return record


async def test_create_returns_the_draft_record(client: httpx.AsyncClient, tenant: Tenant) -> None:
    record = await create(client, tenant)
    assert record["object"] == "template" and record["status"] == "draft"
    assert record["alias"] == "welcome" and record["name"] == "Welcome"
    assert record["subject"] == WELCOME["subject"] and record["html"] == WELCOME["html"]
    assert record["variables"] == [{"key": "plan.name", "fallback_value": "Free"}]
    assert record["published_at"] is None and record["has_unpublished_changes"] is False
    assert record["created_at"].endswith("Z") and record["updated_at"] == record["created_at"]
    fetched = await client.get(f"/templates/{record['id']}", headers=tenant.headers())
    assert fetched.json() == record
    by_alias = await client.get("/templates/welcome", headers=tenant.headers())
    assert by_alias.json() == record


@pytest.mark.parametrize(
    "changes",
    [
        {"alias": "Welcome"},
        {"alias": "with space"},
        {"alias": "a" * 65},
        {"alias": ""},
        {"alias": "0190d4c4-0000-7000-8000-000000000000"},
        {"alias": 5},
        {"name": ""},
        {"name": None},
        {"html": None, "text": None},
        {"subject": "two\r\nlines"},
        {"html": 3},
        {"variables": "x"},
        {"variables": [{"key": "a b"}]},
        {"variables": [{"key": "a"}, {"key": "a"}]},
        {"variables": [{"key": "a", "fallback_value": {"x": 1}}]},
        {"variables": [{"key": "a", "type": "date"}]},
    ],
)
async def test_create_rejects_bad_fields(
    client: httpx.AsyncClient, tenant: Tenant, changes: dict[str, Any]
) -> None:
    response = await client.post(
        "/templates", json={**WELCOME, **changes}, headers=tenant.headers()
    )
    assert_error(response, 422, "validation_error")
    listed = await client.get("/templates", headers=tenant.headers())
    assert listed.json() == {"object": "list", "data": [], "has_more": False}


async def test_alias_is_unique_per_team(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    await create(client, tenant, alias="a" * 64)
    taken = await client.post(
        "/templates", json={**WELCOME, "alias": "a" * 64}, headers=tenant.headers()
    )
    assert_error(taken, 409, "conflict")
    other = await make_tenant(services)
    assert (await create(client, other, alias="a" * 64))["alias"] == "a" * 64
    without = await create(client, tenant, alias=None)
    assert without["alias"] is None and (await create(client, tenant, alias=None))["alias"] is None


async def test_another_teams_template_is_not_found(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    record = await create(client, tenant)
    other = (await make_tenant(services)).headers()
    for method, path in [
        ("GET", f"/templates/{record['id']}"),
        ("GET", "/templates/welcome"),
        ("PATCH", f"/templates/{record['id']}"),
        ("POST", f"/templates/{record['id']}/publish"),
        ("GET", f"/templates/{record['id']}/preview"),
        ("POST", f"/templates/{record['id']}/duplicate"),
        ("DELETE", f"/templates/{record['id']}"),
    ]:
        kwargs: dict[str, Any] = {"json": {"name": "x"}} if method == "PATCH" else {}
        response = await client.request(method, path, headers=other, **kwargs)
        assert_error(response, 404, "not_found")
    missing = "0190d4c4-0000-7000-8000-000000000000"
    assert_error(
        await client.get(f"/templates/{missing}", headers=tenant.headers()), 404, "not_found"
    )
    assert (await client.get(f"/templates/{record['id']}", headers=tenant.headers())).is_success


async def test_list_returns_the_full_set_oldest_first(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    ids = [(await create(client, tenant, alias=f"t{i}"))["id"] for i in range(7)]
    await create(client, await make_tenant(services), alias="other")
    response = await client.get("/templates", headers=tenant.headers())
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    listed = response.json()
    assert listed["object"] == "list" and [t["id"] for t in listed["data"]] == ids
    assert listed["data"][0]["html"] == WELCOME["html"]


async def test_patch_of_a_draft_edits_it_in_place(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    record = await create(client, tenant)
    response = await client.patch(
        f"/templates/{record['id']}",
        json={"subject": "Hello {{ first_name }}", "alias": "hello", "text": None},
        headers=tenant.headers(),
    )
    assert response.status_code == 200, response.text
    edited = response.json()
    assert edited["subject"] == "Hello {{ first_name }}" and edited["alias"] == "hello"
    assert edited["text"] is None and edited["html"] == WELCOME["html"]
    assert edited["status"] == "draft" and edited["has_unpublished_changes"] is False
    assert edited["updated_at"] >= record["updated_at"]
    assert_error(await client.get("/templates/welcome", headers=tenant.headers()), 404, "not_found")
    no_body = await client.patch(
        f"/templates/{record['id']}", json={"html": None}, headers=tenant.headers()
    )
    assert_error(no_body, 422, "validation_error")


async def test_patch_to_a_taken_alias_is_a_conflict(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    first = await create(client, tenant, alias="first")
    await create(client, tenant, alias="second")
    response = await client.patch(
        f"/templates/{first['id']}",
        json={"alias": "second", "name": "New"},
        headers=tenant.headers(),
    )
    assert_error(response, 409, "conflict")
    unchanged = (await client.get(f"/templates/{first['id']}", headers=tenant.headers())).json()
    assert unchanged["alias"] == "first" and unchanged["name"] == "Welcome"
    same = await client.patch(
        f"/templates/{first['id']}", json={"alias": "first"}, headers=tenant.headers()
    )
    assert same.status_code == 200


async def test_publish_freezes_a_version_until_the_next_publish(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    record = await create(client, tenant)
    path = f"/templates/{record['id']}"
    published = (await client.post(f"{path}/publish", headers=tenant.headers())).json()
    assert published["status"] == "published" and published["published_at"] is not None
    assert published["has_unpublished_changes"] is False
    again = (await client.post(f"{path}/publish", headers=tenant.headers())).json()
    assert again["published_at"] == published["published_at"]

    edited = (
        await client.patch(path, json={"subject": "New {{ first_name }}"}, headers=tenant.headers())
    ).json()
    assert edited["status"] == "published" and edited["has_unpublished_changes"] is True
    assert edited["subject"] == "New {{ first_name }}"
    renamed = (await client.patch(path, json={"name": "Renamed"}, headers=tenant.headers())).json()
    assert renamed["has_unpublished_changes"] is True and renamed["name"] == "Renamed"

    republished = (await client.post(f"{path}/publish", headers=tenant.headers())).json()
    assert republished["has_unpublished_changes"] is False
    assert republished["published_at"] >= published["published_at"]
    unchanged_edit = (
        await client.patch(path, json={"subject": "New {{ first_name }}"}, headers=tenant.headers())
    ).json()
    assert unchanged_edit["has_unpublished_changes"] is False


async def test_preview_renders_fallbacks_and_leaves_the_rest_visible(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    record = await create(
        client, tenant, html="<p>{{ first_name }} {{ plan.name }} {{{ raw }}}</p>"
    )
    response = await client.get(f"/templates/{record['id']}/preview", headers=tenant.headers())
    assert response.status_code == 200, response.text
    assert response.json() == {
        "object": "template_preview",
        "id": record["id"],
        "subject": "Welcome, {{ first_name }}",
        "html": "<p>{{ first_name }} Free {{{ raw }}}</p>",
        "text": "Hi {{ first_name }}",
        "missing_variables": ["first_name", "raw"],
    }


async def test_preview_shows_the_latest_draft(client: httpx.AsyncClient, tenant: Tenant) -> None:
    record = await create(client, tenant)
    path = f"/templates/{record['id']}"
    await client.post(f"{path}/publish", headers=tenant.headers())
    await client.patch(
        path,
        json={
            "text": "Bye {{ plan.name }}",
            "variables": [{"key": "plan.name", "fallback_value": 3}],
        },
        headers=tenant.headers(),
    )
    preview = (await client.get(f"{path}/preview", headers=tenant.headers())).json()
    assert preview["text"] == "Bye 3"


async def test_duplicate_makes_a_draft_with_a_free_alias(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    record = await create(client, tenant)
    path = f"/templates/{record['id']}"
    await client.post(f"{path}/publish", headers=tenant.headers())
    copies = []
    for _ in range(3):
        response = await client.post(f"{path}/duplicate", headers=tenant.headers())
        assert response.status_code == 201, response.text
        copies.append(response.json())
    assert [c["alias"] for c in copies] == ["welcome-copy", "welcome-copy-2", "welcome-copy-3"]
    first = copies[0]
    assert first["id"] != record["id"] and first["status"] == "draft"
    assert first["name"] == "Welcome (copy)" and first["published_at"] is None
    assert first["html"] == record["html"] and first["variables"] == record["variables"]
    copy_of_copy = await client.post("/templates/welcome-copy/duplicate", headers=tenant.headers())
    assert copy_of_copy.json()["alias"] == "welcome-copy-copy"


async def test_duplicate_keeps_the_alias_within_64_characters(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    long = "x" * 64
    record = await create(client, tenant, alias=long)
    aliases = []
    for _ in range(2):
        response = await client.post(
            f"/templates/{record['id']}/duplicate", headers=tenant.headers()
        )
        aliases.append(response.json()["alias"])
    assert aliases == ["x" * 59 + "-copy", "x" * 57 + "-copy-2"]
    no_alias = await create(client, tenant, alias=None)
    copied = await client.post(f"/templates/{no_alias['id']}/duplicate", headers=tenant.headers())
    assert copied.json()["alias"] is None


async def test_delete_removes_the_template(client: httpx.AsyncClient, tenant: Tenant) -> None:
    record = await create(client, tenant)
    await client.post(f"/templates/{record['id']}/publish", headers=tenant.headers())
    response = await client.delete("/templates/welcome", headers=tenant.headers())
    assert response.json() == {"object": "template", "id": record["id"], "deleted": True}
    assert_error(
        await client.get(f"/templates/{record['id']}", headers=tenant.headers()), 404, "not_found"
    )
    assert_error(
        await client.delete(f"/templates/{record['id']}", headers=tenant.headers()),
        404,
        "not_found",
    )
    assert (await create(client, tenant))["alias"] == "welcome"


async def test_sending_keys_may_not_manage_templates(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post("/templates", json=WELCOME, headers=tenant.headers("sending"))
    assert_error(response, 401, "restricted_api_key")


async def test_openapi_documents_the_templates_endpoints(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    paths = document["paths"]
    assert set(paths["/templates"]) == {"get", "post"}
    assert set(paths["/templates/{template_id}"]) == {"get", "patch", "delete"}
    assert "post" in paths["/templates/{template_id}/publish"]
    assert "get" in paths["/templates/{template_id}/preview"]
    assert "post" in paths["/templates/{template_id}/duplicate"]
    assert "CreateTemplateRequest" in document["components"]["schemas"]


async def version_count(services: Services) -> int:
    async with services.db.read() as tx:
        query = select(func.count()).select_from(tables.template_versions)
        return int((await tx.conn.execute(query)).scalar_one())


async def test_only_the_published_version_and_the_draft_are_kept(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    record = await create(client, tenant)
    path = f"/templates/{record['id']}"
    await client.post(f"{path}/publish", headers=tenant.headers())
    edits = [
        client.patch(path, json={"subject": f"Edit {n}"}, headers=tenant.headers())
        for n in range(8)
    ]
    answers = await asyncio.gather(*edits)
    assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
    assert await version_count(services) == 2
    await client.post(f"{path}/publish", headers=tenant.headers())
    assert await version_count(services) == 1
    await client.delete(path, headers=tenant.headers())
    assert await version_count(services) == 0
