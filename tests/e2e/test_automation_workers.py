"""Automation runs across worker processes that die: real ``posthaste serve --role worker``
processes run the steps while the test drives the API in process; on SQLite and PostgreSQL.

- A worker SIGKILLed while a run sits in its delay: the next worker finishes the run (the
  delay is a due time in the database, not a timer in the dead process).
- A worker SIGKILLed while it executes send steps: every run still ends with exactly one email
  (a step's email, its completion and the run's progress commit together, or not at all).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.storage.tables import automation_run_steps, emails
from tests.apps import make_app
from tests.conftest import SECRET, make_tenant
from tests.e2e.test_worker_kill import database_url, worker_env, worker_process

__all__ = ["database_url"]  # the fixture, shared with test_worker_kill

RUNS = 150
# Step jobs a claim takes (``POSTHASTE_AUTOMATION_CLAIM_SIZE``, 256 by default): small, so that
# the runs' send steps span several transactions and the worker can be killed among them.
CLAIM = "32"


@asynccontextmanager
async def api(url: str, data_dir: Path) -> AsyncIterator[tuple[Services, httpx.AsyncClient]]:
    settings = Settings(database_url=url, data_dir=data_dir, secret_key=SECRET)
    await migrate(settings)
    services = build_services(settings)
    try:
        transport = httpx.ASGITransport(app=make_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://posthaste.test") as http:
            tenant = await make_tenant(services)
            http.headers.update(tenant.headers())
            yield services, http
    finally:
        await services.close()


def env_for(url: str, data_dir: Path) -> dict[str, str]:
    return {**worker_env(url, data_dir, 0), "POSTHASTE_DELIVERY": "capture"}


async def until(check: Callable[[], Awaitable[Any]], what: str, seconds: float = 60) -> Any:
    for _ in range(int(seconds / 0.05)):
        if found := await check():
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def post(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await http.post(path, json=body)
    assert response.status_code in (200, 201, 202), response.text
    return dict(response.json())


def killed(process: subprocess.Popen[bytes]) -> Awaitable[int]:
    process.kill()  # SIGKILL: no cleanup; its claimed jobs come back when their leases run out
    return asyncio.to_thread(process.wait, 15)


async def runs_with(http: httpx.AsyncClient, automation_id: str, status: str) -> list[Any]:
    response = await http.get(f"/automations/{automation_id}/runs?status={status}")
    return list(response.json()["data"])


async def test_a_run_survives_a_worker_killed_during_its_delay(
    database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    async with api(database_url, tmp_path) as (services, http):
        segment = await post(http, "/segments", {"name": "Welcomed"})
        steps = [
            {"key": "start", "type": "trigger", "config": {"event": "contact.created"}},
            {"key": "pause", "type": "delay", "config": {"duration": "3s"}},
            {
                "key": "mail",
                "type": "send_email",
                "config": {"from": "hi@acme.test", "subject": "Hi", "text": "Welcome"},
            },
            {"key": "tag", "type": "add_to_segment", "config": {"segment_id": segment["id"]}},
        ]
        links = [
            {"from": a, "to": b}
            for a, b in (("start", "pause"), ("pause", "mail"), ("mail", "tag"))
        ]
        automation = await post(
            http,
            "/automations",
            {"name": "Welcome", "status": "enabled", "steps": steps, "connections": links},
        )
        await post(http, "/contacts", {"email": "ann@example.com"})
        env = env_for(database_url, tmp_path)

        async def delaying() -> bool:
            async with services.db.read() as tx:
                query = select(automation_run_steps.c.key).where(
                    automation_run_steps.c.key == "pause"
                )
                return (await tx.conn.execute(query)).first() is not None

        async with worker_process(env, log) as doomed:
            await until(delaying, "the run to enter its delay")
            await killed(doomed)
        assert await runs_with(http, automation["id"], "running")
        async with worker_process(env, log):
            [run] = await until(
                lambda: runs_with(http, automation["id"], "completed"), "the run to complete"
            )
        detail = (await http.get(f"/automations/{automation['id']}/runs/{run['id']}")).json()
        assert [s["key"] for s in detail["steps"]] == ["start", "pause", "mail", "tag"]
        members = (await http.get(f"/segments/{segment['id']}/contacts")).json()["data"]
        assert [m["email"] for m in members] == ["ann@example.com"]
        async with services.db.read() as tx:
            assert len((await tx.conn.execute(select(emails.c.id))).all()) == 1


async def test_send_steps_mail_at_most_once_when_a_worker_is_killed_among_them(
    database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    async with api(database_url, tmp_path) as (services, http):
        steps = [
            {"key": "start", "type": "trigger", "config": {"event": "contact.created"}},
            {
                "key": "mail",
                "type": "send_email",
                "config": {"from": "hi@acme.test", "subject": "Hi", "text": "Once"},
            },
        ]
        automation = await post(
            http,
            "/automations",
            {
                "name": "Once",
                "status": "enabled",
                "steps": steps,
                "connections": [{"from": "start", "to": "mail"}],
            },
        )
        for number in range(RUNS):
            await post(http, "/contacts", {"email": f"c{number}@example.com"})

        async def recipients() -> Counter[str]:
            async with services.db.read() as tx:
                rows = (await tx.conn.execute(select(emails.c.to))).all()
            return Counter(address for row in rows for address in row.to)

        env = {**env_for(database_url, tmp_path), "POSTHASTE_AUTOMATION_CLAIM_SIZE": CLAIM}
        async with worker_process(env, log) as doomed:
            await until(recipients, "the first automation email")
            await killed(doomed)
        assert sum((await recipients()).values()) < RUNS, "killed after every step was done"
        async with worker_process(env, log):

            async def all_done() -> bool:
                return len(await runs_with(http, automation["id"], "completed")) == RUNS

            await until(all_done, "every run to complete", seconds=120)
        counted = await recipients()
        assert counted == Counter({f"c{n}@example.com": 1 for n in range(RUNS)})
