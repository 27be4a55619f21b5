"""The system under test: fresh databases and a real ``posthaste serve`` subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

PG_ADMIN_DSN = os.environ.get("POSTHASTE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SECRET_KEY = "posthaste-bench-secret-key-" + "b" * 32
PROJECT_ROOT = Path(__file__).resolve().parent.parent
SERVE = ("-m", "posthaste.cli", "serve")
READY_TIMEOUT = 60.0
RAW_SUFFIX = "_raw"  # the raw baseline's database: the server's name and this


@dataclass(frozen=True)
class Backend:
    """One database engine with two fresh databases: the server's and the raw baseline's."""

    name: str  # "sqlite" or "postgres"
    workdir: Path
    server_database_url: str  # as POSTHASTE_DATABASE_URL takes it ("" = SQLite in the data dir)
    raw_async_url: str  # for SQLAlchemy's async engine

    @property
    def data_dir(self) -> Path:
        return self.workdir / "posthaste-data"


async def _pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _pg_url(database: str) -> str:
    return f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{database}"


@contextlib.contextmanager
def prepared(name: str, workdir: Path) -> Iterator[Backend]:
    """Fresh, empty databases for ``name``; PostgreSQL ones are dropped afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    if name == "sqlite":
        raw = workdir / "raw" / "posthaste.db"
        raw.parent.mkdir()
        yield Backend(name, workdir, "", f"sqlite+aiosqlite:///{raw}")
        return
    stem = f"posthaste_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    databases = [stem, stem + RAW_SUFFIX]
    for database in databases:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{database}"'))
    try:
        raw_url = _pg_url(databases[1]).replace("postgresql://", "postgresql+asyncpg://", 1)
        yield Backend(name, workdir, _pg_url(databases[0]), raw_url)
    finally:
        for database in databases:
            asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    """One or more ``posthaste serve`` processes on the same database (one port each)."""

    processes: list[subprocess.Popen[bytes]]
    urls: list[str]
    key: str

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]


def pythonpath(code: Path | None = None) -> str:
    """This checkout's ``src`` and root first: ``-m bench.serve_uvloop`` imports from any
    directory, and a second checkout (a baseline) runs its own code in every process it
    starts, not the installed one. ``code``, else ``POSTHASTE_BENCH_SERVER_SRC`` (another
    checkout's ``src``), goes first: this checkout's benchmark measuring that code (before and
    after a change)."""
    other = str(code) if code is not None else os.environ.get("POSTHASTE_BENCH_SERVER_SRC", "")
    own = [other, str(PROJECT_ROOT / "src")]
    own.append(str(PROJECT_ROOT))
    return os.pathsep.join(filter(None, [*own, os.environ.get("PYTHONPATH")]))


def server_env(backend: Backend, port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "POSTHASTE_ROLE": "api",  # accept only: no worker competing for the cores
        "POSTHASTE_DATA_DIR": str(backend.data_dir),
        "POSTHASTE_HTTP_PORT": str(port),
        "POSTHASTE_LOG_LEVEL": "warning",
        "PYTHONPATH": pythonpath(),
    }
    if backend.server_database_url:
        env["POSTHASTE_DATABASE_URL"] = backend.server_database_url
        env["POSTHASTE_SECRET_KEY"] = SECRET_KEY
    return env


def _cli(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "posthaste.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"posthaste {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout.strip()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited early:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the server did not become ready:\n{log.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _start(
    backend: Backend, command: Sequence[str], extra_env: Mapping[str, str], index: int
) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    port = free_port()
    env = {**server_env(backend, port), **extra_env}
    log = backend.workdir / f"server-{index}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *command], env=env, cwd=backend.workdir, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"
    _wait_ready(url, process, log)
    return process, url, env


@contextlib.contextmanager
def running(
    backend: Backend,
    command: Sequence[str] = SERVE,
    extra_env: Mapping[str, str] | None = None,
    processes: int = 1,
) -> Iterator[Server]:
    """``processes`` x ``posthaste serve`` (API role), each on a free port, sharing team
    ``bench`` (no rate limit) and a test key; stopped with SIGTERM on exit. ``command``
    follows the Python interpreter."""
    backend.data_dir.mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for index in range(processes):
            process, url, env = _start(backend, command, extra_env or {}, index)
            started.append(process)
            urls.append(url)
        _cli(env, backend.workdir, "teams", "create", "bench", "--rate-limit", "0")
        key = _cli(env, backend.workdir, "keys", "create", "--team", "bench", "--mode", "test")
        yield Server(started, urls, key)
    finally:
        for process in started:
            _stop(process)
