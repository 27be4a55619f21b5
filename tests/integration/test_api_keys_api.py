"""/api-keys beyond create, list and revoke: renaming a key (Resend's PATCH), scoped by team."""

from __future__ import annotations

import httpx
import pytest

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from tests.conftest import Tenant, make_tenant
from tests.integration.test_api_emails import assert_error


async def _create(client: httpx.AsyncClient, tenant: Tenant, name: str) -> dict[str, object]:
    response = await client.post("/api-keys", json={"name": name}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created


async def _listed(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, object]:
    body = (await client.get("/api-keys", headers=tenant.headers())).json()
    assert body["has_more"] is False
    return {key["id"]: key for key in body["data"]}


async def test_rename_changes_the_name_only_and_the_key_still_works(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    created = await _create(client, tenant, "ci")
    key_id = str(created["id"])
    response = await client.patch(
        f"/api-keys/{key_id}", json={"name": "  ci runner  "}, headers=tenant.headers()
    )
    assert response.status_code == 200, response.text
    renamed = response.json()
    assert renamed["name"] == "ci runner" and "token" not in renamed
    unchanged = {k: v for k, v in created.items() if k not in ("name", "token")}
    assert {k: v for k, v in renamed.items() if k != "name"} == unchanged
    assert (await _listed(client, tenant))[key_id] == renamed
    token = {"Authorization": f"Bearer {created['token']}"}
    assert (await client.get("/api-keys", headers=token)).status_code == 200


BAD_NAMES = [{}, {"name": ""}, {"name": "  "}, {"name": 7}, {"name": "x" * 201}]


@pytest.mark.parametrize("body", BAD_NAMES)
async def test_an_invalid_name_is_422_and_changes_nothing(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, object]
) -> None:
    key_id = str((await _create(client, tenant, "kept"))["id"])
    response = await client.patch(f"/api-keys/{key_id}", json=body, headers=tenant.headers())
    assert "name" in assert_error(response, 422, "validation_error")["message"]
    assert (await _listed(client, tenant))[key_id]["name"] == "kept"  # type: ignore[index]


async def test_another_teams_or_a_revoked_key_is_not_found(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    key_id = str((await _create(client, tenant, "mine"))["id"])
    other = await make_tenant(services)
    response = await client.patch(
        f"/api-keys/{key_id}", json={"name": "theirs"}, headers=other.headers()
    )
    assert_error(response, 404, "not_found")
    assert (await _listed(client, tenant))[key_id]["name"] == "mine"  # type: ignore[index]

    assert (await client.delete(f"/api-keys/{key_id}", headers=tenant.headers())).status_code == 200
    for gone in (key_id, new_id(), "not-an-id"):
        response = await client.patch(
            f"/api-keys/{gone}", json={"name": "back"}, headers=tenant.headers()
        )
        assert_error(response, 404, "not_found")


async def test_a_sending_key_may_not_rename(client: httpx.AsyncClient, tenant: Tenant) -> None:
    key_id = str((await _create(client, tenant, "mine"))["id"])
    response = await client.patch(
        f"/api-keys/{key_id}", json={"name": "x"}, headers=tenant.headers("sending")
    )
    assert_error(response, 401, "restricted_api_key")
