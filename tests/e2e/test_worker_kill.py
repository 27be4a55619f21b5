"""A worker killed with SIGKILL in the middle of a delivery loses nothing (PRODUCT §5).

A real ``posthaste serve --role worker`` delivers through ``smtp://`` to a loopback sink that
holds DATA; the test SIGKILLs it there, starts a second worker, and the email is delivered
after the lease runs out: the sink sees it at most twice and the email ends ``sent``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest

from posthaste.bootstrap import build_services, migrate
from posthaste.config import Settings
from tests.apps import make_app
from tests.conftest import PG_ADMIN_DSN, SECRET, _pg_admin, make_tenant
from tests.senders import AnySender
from tests.smtp_sink import Sink, running_sink

LEASE = "2s"


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'posthaste.db'}"
        return
    name = f"posthaste_kill_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL is required for this test: {exc}")
    yield f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{name}"
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "posthaste.cli", "serve", "--role", "worker"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def until(condition: Callable[[], Awaitable[bool]], what: str, seconds: float = 30) -> None:
    for _ in range(int(seconds / 0.05)):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@asynccontextmanager
async def worker_process(env: dict[str, str], log: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    process = start_worker(env, log)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            await asyncio.to_thread(process.wait, 15)


async def test_a_killed_worker_loses_no_email(database_url: str, tmp_path: Path) -> None:
    settings = Settings(database_url=database_url, data_dir=tmp_path, secret_key=SECRET)
    await migrate(settings)
    services = build_services(settings, senders=AnySender(settings.default_region))
    sink = Sink(hold=asyncio.Event())
    log = tmp_path / "workers.log"
    app = httpx.ASGITransport(app=make_app(services))
    try:
        async with (
            running_sink(sink),
            httpx.AsyncClient(transport=app, base_url="http://posthaste.test") as http,
        ):
            tenant = await make_tenant(services)
            headers = tenant.headers("live")
            body = {"from": "hello@acme.test", "to": "someone@example.com", "subject": "Hi"}
            response = await http.post("/emails", json={**body, "text": "Hi"}, headers=headers)
            assert response.status_code == 200, response.text
            email_id = response.json()["id"]

            async def status_is(expected: str) -> bool:
                record = (await http.get(f"/emails/{email_id}", headers=headers)).json()
                return bool(record["status"] == expected)

            async def data_started() -> bool:
                return sink.data_started >= 1

            env = worker_env(database_url, tmp_path, sink.port)
            async with worker_process(env, log) as doomed:
                await until(data_started, "the first worker to reach DATA")
                doomed.kill()  # SIGKILL: no cleanup, the job stays leased
                await asyncio.to_thread(doomed.wait, 15)
            assert await status_is("sending")
            assert sink.hold is not None
            sink.hold.set()  # the dead session's DATA may complete now; nobody hears the 250
            async with worker_process(env, log):
                await until(lambda: status_is("sent"), "the second worker, after the lease")
            assert 1 <= len(sink.messages) <= 2
            assert {m.recipients[0] for m in sink.messages} == {"someone@example.com"}
            events = (await http.get(f"/emails/{email_id}/events", headers=headers)).json()
            assert [e["type"] for e in events["data"]] == [
                "email.queued",
                "email.sending",
                "email.sent",
            ]
    except AssertionError:
        print(log.read_text() if log.exists() else "(no worker log)")
        raise
    finally:
        await services.close()


def worker_env(database_url: str, data_dir: Path, sink_port: int) -> dict[str, str]:
    return {
        **os.environ,
        "POSTHASTE_DATABASE_URL": database_url,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_SECRET_KEY": SECRET,
        "POSTHASTE_DELIVERY": f"smtp://127.0.0.1:{sink_port}?tls=none",
        "POSTHASTE_JOB_LEASE": LEASE,
        "POSTHASTE_LOG_LEVEL": "warning",
    }
