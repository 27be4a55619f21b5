"""What a client sees when things break: never a stack trace, always the documented body."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from tests.apps import make_app
from tests.conftest import Tenant


async def test_an_unexpected_error_is_a_plain_500(
    client: httpx.AsyncClient, services: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals: password=hunter2")

    monkeypatch.setattr(services.emails, "page", broken)
    response = await client.get("/emails", headers=tenant.headers())
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "statusCode": 500,
        "name": "internal_server_error",
        "message": "An unexpected error occurred; it has been logged.",
    }
    assert "hunter2" not in response.text and "Traceback" not in response.text


async def test_database_down_is_503(tmp_path: Path) -> None:
    down = Settings(
        database_url="postgresql://postgres@127.0.0.1:1/nowhere",
        data_dir=tmp_path,
        secret_key="s" * 32,
    )
    services = build_services(down)
    try:
        transport = httpx.ASGITransport(app=make_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 503 and ready.json()["name"] == "service_unavailable"
            response = await http.get("/emails", headers={"Authorization": "Bearer ph_test_x"})
            assert response.status_code == 503 and response.json()["name"] == "service_unavailable"
            assert (await http.get("/healthz")).status_code == 200
    finally:
        await services.close()
