"""``POST /emails`` and ``POST /emails/batch`` answered ahead of FastAPI's routing
(``api.routes.emails.SendPaths``): every answer as the routes give it, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send

from posthaste.api.routes import emails
from posthaste.api.routes.emails import SendPaths
from posthaste.bootstrap import Services
from tests.apps import make_app
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body
from tests.openapi_check import checked_client

# What differs between two accepted emails of the same request.
_OWN = {"id", "created_at", "message_id"}
# What differs between two answers of the same request.
_PER_ANSWER = {"x-request-id", "date"}


def _routes_only(services: Services) -> FastAPI:
    """The app without ``SendPaths``: every request goes through FastAPI's routes."""
    app = make_app(services)
    app.user_middleware = [m for m in app.user_middleware if m.cls is not SendPaths]
    return app


@pytest.fixture
async def both(services: Services) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with (
        checked_client(make_app(services)) as direct,
        checked_client(_routes_only(services)) as routed,
    ):
        yield direct, routed


def _comparable(response: httpx.Response) -> tuple[int, dict[str, str], Any]:
    headers = {k: v for k, v in response.headers.items() if k not in _PER_ANSWER}
    body: Any = response.content
    if response.headers.get("content-type") == "application/json":
        body = _without_own(orjson.loads(response.content))
        headers.pop("content-length", None)  # ids and times of their own
    return response.status_code, headers, body


def _without_own(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "…" if k in _OWN else _without_own(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_own(v) for v in value]
    return value


def _cases(tenant: Tenant) -> list[tuple[str, dict[str, str], bytes]]:
    """(path with query, headers, body) of ``POST`` requests, good and bad."""
    live = tenant.headers()
    sending = tenant.headers("sending")
    one = orjson.dumps(email_body())
    batch = orjson.dumps([email_body(), email_body(to="not an address"), {"from": 1}])
    return [
        ("/emails", live, one),
        ("/emails", sending, one),
        ("/emails", {}, one),
        ("/emails", {"Authorization": "Basic abc"}, one),
        ("/emails", {"Authorization": "Bearer ph_live_doesnotexist"}, one),
        ("/emails", live, b""),
        ("/emails", {}, b""),  # the key is checked before the body is read
        ("/emails", {"Authorization": "Bearer ph_live_doesnotexist"}, b"{not json"),
        ("/emails", live, b"  \n"),
        ("/emails", live, b"{not json"),
        ("/emails", live, b"[1, 2]"),
        ("/emails", live, orjson.dumps(email_body(to="not an address"))),
        ("/emails", live, orjson.dumps(email_body(subject="a\u0000b"))),
        ("/emails", {**live, "Idempotency-Key": ""}, one),
        ("/emails", {**live, "Idempotency-Key": "k\x7f"}, one),
        ("/emails", {**live, "Idempotency-Key": "x" * 257}, one),
        ("/emails?x=%00", live, one),
        ("/emails?x=%00", {}, one),
        ("/emails?x=1", live, one),
        ("/emails/batch", live, batch),
        ("/emails/batch", {**live, "x-batch-validation": "Permissive"}, batch),
        ("/emails/batch", live, one),
        ("/emails/batch", live, b"[]"),
        ("/emails/batch", {}, batch),
        ("/emails/batch", {}, b"{not json"),
        ("/emails/batch?%00", live, batch),
    ]


async def test_each_answer_is_the_routes_answer(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient], tenant: Tenant
) -> None:
    direct, routed = both
    for path, headers, content in _cases(tenant):
        expected = await routed.post(path, headers=headers, content=content)
        answered = await direct.post(path, headers=headers, content=content)
        assert _comparable(answered) == _comparable(expected), (path, headers, content)
        assert "x-request-id" in answered.headers


async def test_idempotent_sends_replay_across_both(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient], tenant: Tenant
) -> None:
    direct, routed = both
    headers = {**tenant.headers(), "Idempotency-Key": "order-1"}
    first = await direct.post("/emails", headers=headers, json=email_body())
    again = await routed.post("/emails", headers=headers, json=email_body())
    other = await direct.post("/emails", headers=headers, json=email_body(subject="Other"))
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    expected = await routed.post("/emails", headers=headers, json=email_body(subject="Other"))
    assert _comparable(other) == _comparable(expected) and other.status_code == 409


async def test_rate_limited_alike(services: Services) -> None:
    limited = await make_tenant(services, rate_limit=1)
    one = orjson.dumps(email_body())
    answers = []
    for app in (make_app(services), _routes_only(services)):
        async with checked_client(app) as http:
            statuses = []
            for _ in range(4):  # a burst of twice the rate, then refused
                answer = await http.post("/emails", headers=limited.headers(), content=one)
                statuses.append(answer.status_code)
            answers.append((statuses, _comparable(answer)[:2]))
    [(direct, refused), (routed, expected)] = answers
    assert 429 in direct and 429 in routed
    assert refused[0] == expected[0] == 429
    assert refused[1].keys() == expected[1].keys() and "retry-after" in refused[1]


class _Routes:
    """The app inside ``SendPaths``: records what reached it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def test_sends_are_answered_without_the_routes(services: Services, tenant: Tenant) -> None:
    inner = _Routes()
    routes = [r for r in emails.router.routes if isinstance(r, APIRoute)]
    paths = SendPaths(inner, services=services, routes=routes)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=paths), base_url="http://posthaste.test"
    ) as http:
        sent = await http.post("/emails", headers=tenant.headers(), json=email_body())
        batch = await http.post("/emails/batch", headers=tenant.headers(), json=[email_body()])
        refused = await http.post("/emails", json=email_body())
        assert (sent.status_code, batch.status_code, refused.status_code) == (200, 200, 401)
        assert inner.paths == []
        for path in ("/emails?q=%00", "/emails/", "/emails/batch/x"):
            assert (await http.post(path, json=email_body())).status_code == 204
        assert (await http.get("/emails")).status_code == 204
    assert inner.paths == ["/emails", "/emails/", "/emails/batch/x", "/emails"]
