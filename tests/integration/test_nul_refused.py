"""A NUL (U+0000) in a request's body or query is a 422 ``validation_error`` that stores
nothing, and in its path a 404, on both backends (PostgreSQL's text cannot hold it: the API
fuzzer found a 500 on ``POST /topics``; lookups by such a path answered 500 too)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Tenant

NUL_REFUSED = "Text may not contain NUL (U+0000); remove it."


@pytest.mark.parametrize(
    "body",
    [
        {"name": "News", "description": "x\u0000", "default_subscription": "opt_in"},
        {"name": "N\u0000", "default_subscription": "opt_in"},
        {"name": "News", "default_subscription": "opt_in", "k\u0000": 1},
    ],
)
async def test_nul_in_a_body_is_refused(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, object]
) -> None:
    answer = await client.post("/topics", json=body, headers=tenant.headers())
    assert answer.status_code == 422, answer.text
    assert answer.json() == {"statusCode": 422, "name": "validation_error", "message": NUL_REFUSED}
    assert (await client.get("/topics", headers=tenant.headers())).json()["data"] == []


async def test_an_escaped_backslash_u0000_is_text_not_nul(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {"name": "News", "description": "\\u0000", "default_subscription": "opt_in"}
    answer = await client.post("/topics", json=body, headers=tenant.headers())
    assert answer.status_code == 201, answer.text
    assert answer.json()["description"] == "\\u0000"


@pytest.mark.parametrize("url", ["/emails?subject=%00", "/emails?tag=a%00:b", "/topics?limit=%00"])
async def test_nul_in_a_query_is_refused(
    client: httpx.AsyncClient, tenant: Tenant, url: str
) -> None:
    answer = await client.get(url, headers=tenant.headers())
    assert answer.status_code == 422, answer.text
    assert answer.json()["message"] == NUL_REFUSED


@pytest.mark.parametrize(
    "path", ["/templates/%00", "/suppressions/x%00@example.com", "/domains/%00", "/topics/%00"]
)
async def test_nul_in_a_path_names_nothing(
    client: httpx.AsyncClient, tenant: Tenant, path: str
) -> None:
    answer = await client.get(path, headers=tenant.headers())
    assert answer.status_code == 404, answer.text
    assert answer.json()["name"] == "not_found"
