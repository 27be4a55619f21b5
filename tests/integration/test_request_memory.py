"""Large requests share a memory budget per process (``POSTHASTE_REQUEST_MEMORY``): beyond it they
wait their turn, and after the wait they are answered 503 with ``Retry-After``; none is lost and
the process never takes more than the budget's worth of large bodies at once. And one large
request holds at most two copies of its body at a time (traced by ``tracemalloc``)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import tracemalloc
from collections.abc import AsyncIterator, Awaitable

import httpx
import orjson
import pytest
from starlette.types import Receive, Scope, Send

from posthaste.api.middleware import BodyLimit, MemoryBudget
from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from tests.apps import make_app
from tests.conftest import Tenant, make_tenant

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
        transport = httpx.ASGITransport(app=make_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
            answers = await asyncio.gather(
                *(http.post("/emails", json=body, headers=tenant.headers()) for _ in range(12))
            )
        assert [a.status_code for a in answers] == [200] * 12, answers[0].text
        assert len({a.json()["id"] for a in answers}) == 12
    finally:
        await services.close()


# The peak of a request's traced memory, in copies of its body. The body is held twice at most
# (its text and what is parsed from it; then the text and the decoded attachments; then those
# alone), plus the allocator's rounding: 2.00 for one email, 2.10 for the batch, on either
# database. On PostgreSQL an attachment of a MiB or more goes in pieces of 1 MiB
# (``storage.blobs``), so asyncpg, which holds a bytea parameter about three times while it
# sends it, holds one piece: it was 2.83 with the attachments in the statement.
MOST_COPIES = {"sqlite": 2.2, "postgres": 2.2}


def _email(attachment: bytes, name: str = "big.bin") -> dict[str, object]:
    return {
        "from": "a@acme.test",
        "to": "delivered@simulator.test",
        "subject": "Large",
        "text": "see the attachment",
        "attachments": [{"filename": name, "content": base64.b64encode(attachment).decode()}],
    }


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    """The body as an ASGI server hands it over, 64 KiB at a time."""
    for start in range(0, len(body), 65536):
        yield body[start : start + 65536]


async def _peak(request: Awaitable[httpx.Response]) -> tuple[httpx.Response, int]:
    """The response and the peak of traced memory above where it stood before the request."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        answer = await request
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return answer, peak - before


async def _post_large(
    http: httpx.AsyncClient, path: str, document: object, headers: dict[str, str]
) -> tuple[httpx.Response, float]:
    """The answer and the request's peak in copies of its body (a small one warms caches)."""
    warm = [_email(b"warm")] if path.endswith("batch") else _email(b"warm")
    plain = {k: v for k, v in headers.items() if k != "Idempotency-Key"}
    assert (await http.post(path, json=warm, headers=plain)).status_code == 200
    body = orjson.dumps(document)
    sized = {**headers, "Content-Type": "application/json", "Content-Length": str(len(body))}
    answer, peak = await _peak(http.post(path, content=_chunks(body), headers=sized))
    assert answer.status_code == 200, answer.text
    return answer, peak / len(body)


async def _stored(http: httpx.AsyncClient, tenant: Tenant, email_id: str) -> list[bytes]:
    listed = await http.get(f"/emails/{email_id}/attachments", headers=tenant.headers())
    return [
        (
            await http.get(f"/emails/{email_id}/attachments/{a['id']}", headers=tenant.headers())
        ).content
        for a in listed.json()["data"]
    ]


async def test_a_large_email_holds_at_most_two_copies_of_its_body(
    services: Services, tenant: Tenant, backend: str
) -> None:
    """A 6 MiB attachment (an 8 MiB body), with an idempotency key (the body's fingerprint)."""
    attachment = os.urandom(6 * MIB)
    headers = {**tenant.headers(), "Idempotency-Key": "large-1"}
    transport = httpx.ASGITransport(app=make_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
        answer, copies = await _post_large(http, "/emails", _email(attachment), headers)
        assert await _stored(http, tenant, answer.json()["id"]) == [attachment]
    assert copies < MOST_COPIES[backend], f"{copies:.2f} copies of the body"


async def test_a_large_batch_holds_at_most_two_copies_of_its_body(
    services: Services, tenant: Tenant, backend: str
) -> None:
    """Two emails of a 3 MiB attachment each, the second's base64 in lines of 76 characters."""
    first, second = os.urandom(3 * MIB), os.urandom(3 * MIB)
    wrapped = _email(second, "wrapped.bin")
    wrapped["attachments"][0]["content"] = base64.encodebytes(second).decode()  # type: ignore[index]
    transport = httpx.ASGITransport(app=make_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
        answer, copies = await _post_large(
            http, "/emails/batch", [_email(first), wrapped], tenant.headers()
        )
        ids = [item["id"] for item in answer.json()["data"]]
        assert [await _stored(http, tenant, i) for i in ids] == [[first], [second]]
    assert copies < MOST_COPIES[backend], f"{copies:.2f} copies of the body"


async def _until(condition: object, seconds: float = 30) -> None:
    assert callable(condition)
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail("timed out")
