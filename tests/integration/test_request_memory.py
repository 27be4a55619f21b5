"""Large requests share a memory budget per process (``POSTHASTE_REQUEST_MEMORY``): beyond it they
wait their turn, and after the wait they are answered 503 with ``Retry-After``; none is lost and
the process never takes more than the budget's worth of large bodies at once."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from posthaste.api.app import create_app
from posthaste.api.middleware import BodyLimit, MemoryBudget
from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from tests.conftest import make_tenant

MIB = 1024 * 1024


class Holding:
    """An app that reads the body, then waits until released; counts what it holds at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.inside = 0
        self.most = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        self.inside += 1
        self.most = max(self.most, self.inside)
        await self.release.wait()
        self.inside -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def test_beyond_the_budget_requests_wait_then_get_503() -> None:
    inner = Holding()
    budget = MemoryBudget(3 * MIB, wait=0.5)
    app = BodyLimit(inner, budget=budget)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        body = b"x" * (2 * MIB)
        first = asyncio.create_task(http.post("/", content=body))
        await _until(lambda: inner.inside == 1)
        refused = await http.post("/", content=body)  # no room within the wait
        assert refused.status_code == 503
        assert refused.json()["name"] == "service_unavailable"
        assert refused.headers["retry-after"] == "5"
        small = asyncio.create_task(http.post("/", content=b"x" * 1000))  # not counted
        await _until(lambda: inner.inside == 2)
        waiting = asyncio.create_task(http.post("/", content=body))
        await asyncio.sleep(0)
        inner.release.set()  # the first ends: the waiting one gets its turn
        assert (await first).status_code == 200
        assert (await small).status_code == 200
        assert (await waiting).status_code == 200
    assert budget.used == 0
    assert inner.most == 2  # the two large bodies were never in at once


async def test_a_body_larger_than_the_budget_passes_alone() -> None:
    inner = Holding()
    inner.release.set()
    budget = MemoryBudget(MIB, wait=0.5)
    transport = httpx.ASGITransport(app=BodyLimit(inner, budget=budget))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        answer = await http.post("/", content=b"x" * (3 * MIB))
    assert answer.status_code == 200 and budget.used == 0


async def test_many_large_emails_at_once_are_all_accepted_in_turn(settings: Settings) -> None:
    """Twelve 2 MiB emails at once through a 4 MiB budget: they queue, every one is stored."""
    services: Services = build_services(dataclasses.replace(settings, request_memory=4 * MIB))
    try:
        tenant = await make_tenant(services)
        attachment = base64.b64encode(b"\x00" * (1400 * 1024)).decode()
        body = {
            "from": "a@acme.test",
            "to": "delivered@simulator.test",
            "subject": "Large",
            "text": "see the attachment",
            "attachments": [{"filename": "blob.bin", "content": attachment}],
        }
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
            answers = await asyncio.gather(
                *(http.post("/emails", json=body, headers=tenant.headers()) for _ in range(12))
            )
        assert [a.status_code for a in answers] == [200] * 12, answers[0].text
        assert len({a.json()["id"] for a in answers}) == 12
    finally:
        await services.close()


async def _until(condition: object, seconds: float = 30) -> None:
    assert callable(condition)
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail("timed out")
