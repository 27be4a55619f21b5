"""A real ``posthaste serve`` process per module and backend, on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import PG_ADMIN_DSN, SECRET, _pg_admin
from tests.dns_server import ZoneServer
from tests.ports import free_port


@dataclass
class RunningServer:
    url: str
    data_dir: Path
    live_key: str
    test_key: str
    env: dict[str, str]


def _bootstrap_keys(data_dir: Path) -> dict[str, str]:
    keys = {}
    for line in (data_dir / "bootstrap-keys.txt").read_text().splitlines():
        if " key: " in line:
            mode, _, token = line.partition(" key: ")
            keys[mode.strip()] = token.strip()
    return keys


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90  # a loaded machine starts a supervised tree slowly
    # One client for the whole wait: each ``httpx.get`` makes a client that loads the CA bundle
    # (40-80 ms of CPU), and polling with it cost the test process as much CPU as the server's
    # own start.
    with httpx.Client(timeout=1) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{log.read_text(errors='replace')}")
            try:
                if http.get(f"{url}/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"server did not become ready:\n{log.read_text(errors='replace')}")


@dataclass
class Serve:
    """A ``posthaste serve`` process started by ``start_serve``."""

    process: subprocess.Popen[bytes]
    url: str  # its API ("" when it runs no API)
    log: Path

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended within 30 s (off the event loop in an
        async test: ``await asyncio.to_thread(serve.stop)``)."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)


def start_serve(
    env: dict[str, str], *args: str, log: Path, cwd: Path | None = None, ready: bool = True
) -> Serve:
    """``posthaste serve *args`` with ``env``, its output appended to ``log``. With ``ready``,
    returns once ``/readyz`` answers on the port of ``--port`` (else POSTHASTE_HTTP_PORT),
    within 90 s; else it is stopped and a RuntimeError carries its log."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "posthaste.cli", "serve", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )
    port = args[args.index("--port") + 1] if "--port" in args else env.get("POSTHASTE_HTTP_PORT")
    serve = Serve(process, f"http://127.0.0.1:{port}" if port else "", log)
    if ready:
        try:
            _wait_ready(serve.url, process, log)
        except BaseException:
            serve.stop()
            raise
    return serve


@contextlib.contextmanager
def fresh_pg_database(prefix: str) -> Iterator[str]:
    """A new PostgreSQL database for a test's servers, dropped afterwards; its URL."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL is required for this test: {exc}")
    try:
        yield f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{name}"
    finally:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    """Extra environment for the module's server; a test module may override this fixture."""
    return {}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    server_env: dict[str, str],
) -> Iterator[RunningServer]:
    # Named like the default data dir, so the README's walk-through runs unchanged beside it.
    data_dir = tmp_path_factory.mktemp("server") / "posthaste-data"
    data_dir.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_HTTP_PORT": str(port),
        "POSTHASTE_SMTP_RELAY_PORT": str(free_port()),
        "POSTHASTE_SMTP_RELAY_TLS_PORT": str(free_port()),
        "POSTHASTE_SMTP_INBOUND_PORT": str(free_port()),
        "POSTHASTE_DELIVERY_RETRY_SCHEDULE": "1s",
        "POSTHASTE_LOG_LEVEL": "warning",
        # One process: what these modules test is the API, the relay and delivery, and a
        # supervised tree (a process per role) costs several interpreter starts per module on a
        # 2-core machine; test_supervisor covers the default layout.
        "POSTHASTE_PROCESSES": "1",
        **server_env,
    }
    database = None
    if request.param == "postgres":
        database = f"posthaste_e2e_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        try:
            asyncio.run(_pg_admin(f'CREATE DATABASE "{database}"'))
        except (OSError, asyncpg.PostgresError) as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"PostgreSQL is required under CI=true: {exc}")
            pytest.skip(f"PostgreSQL not reachable: {exc}")
        env["POSTHASTE_DATABASE_URL"] = f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{database}"
        env["POSTHASTE_SECRET_KEY"] = SECRET
    try:
        serve = start_serve(env, log=data_dir / "server.log", cwd=data_dir.parent)
        try:
            keys = _bootstrap_keys(data_dir)
            # The tests poll as fast as they can: the first run's team has no rate limit to lift.
            yield RunningServer(serve.url, data_dir, keys["live"], keys["test"], env)
        finally:
            serve.stop()
    finally:
        if database:
            asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


@pytest.fixture(scope="module")
def receiving(server: RunningServer, dns_host: ZoneServer) -> str:
    """A receiving domain, its records published at the module's ``dns_host`` and verified;
    its name."""
    headers = {"Authorization": f"Bearer {server.live_key}"}
    created = httpx.post(
        f"{server.url}/domains",
        json={"name": "inbox.test", "capabilities": {"receiving": "enabled"}},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    for record in created.json()["records"]:
        if record["type"] == "TXT":
            dns_host.add(record["name"], "TXT", record["value"])
        else:
            dns_host.add(record["name"], "MX", (record["priority"], record["value"]))
    domain_id = created.json()["id"]
    verified = httpx.post(f"{server.url}/domains/{domain_id}/verify", headers=headers)
    assert verified.json()["status"] == "verified", verified.text
    return "inbox.test"
