"""The per-team rate limit holds across processes: two ``posthaste serve --role api`` processes on
one database, hammered together, accept no more than the rate allows over the run plus one
burst (twice the rate), and each refusal is a 429 with ``Retry-After`` and ``ratelimit-*``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import SECRET
from tests.e2e.conftest import Serve, _bootstrap_keys, fresh_pg_database, start_serve
from tests.ports import free_port

RATE = 10  # requests per second; the burst is twice that


@pytest.fixture
def database_env() -> Iterator[dict[str, str]]:
    """PostgreSQL: a fleet of API processes shares it (on SQLite, ``serve`` runs one API process
    per four cores on one machine; the limiter is the same code on both)."""
    with fresh_pg_database("posthaste_limits") as url:
        yield {"POSTHASTE_DATABASE_URL": url, "POSTHASTE_SECRET_KEY": SECRET}


def api_process(env: dict[str, str], log: Path) -> Serve:
    return start_serve(env, "--role", "api", "--port", str(free_port()), log=log)


def test_two_api_processes_share_one_rate_limit(
    database_env: dict[str, str], tmp_path: Path
) -> None:
    env = {
        **os.environ,
        **database_env,
        "POSTHASTE_DATA_DIR": str(tmp_path),
        "POSTHASTE_LOG_LEVEL": "warning",
    }
    first = api_process(env, tmp_path / "first.log")  # makes the schema and team
    processes = [first]
    try:
        key = _bootstrap_keys(tmp_path)["test"]
        update = ["teams", "update", "default", "--rate-limit", str(RATE)]
        limited = subprocess.run(
            [sys.executable, "-m", "posthaste.cli", *update],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert limited.returncode == 0, limited.stderr
        second = api_process(env, tmp_path / "second.log")
        processes.append(second)
        answers = asyncio.run(hammer([first.url, second.url], key, seconds=3.0))
    finally:
        for process in processes:
            process.stop()
    elapsed = max(a[0] for a in answers) - min(a[0] for a in answers)
    answers = [a for a in answers if a[2] >= 0]
    ok = [a for a in answers if a[1] == 200]
    refused = [a for a in answers if a[1] == 429]
    assert len(ok) + len(refused) == len(answers), {a[1] for a in answers}
    assert {a[2] for a in ok} == {0, 1}  # both processes accepted some
    assert RATE <= len(ok) <= 2 * RATE + RATE * elapsed + 1, (len(ok), elapsed)
    assert refused, "the clients asked for far more than the rate"
    headers = refused[0][3]
    assert int(headers["retry-after"]) >= 1 and headers["ratelimit-limit"] == str(RATE)
    assert headers["ratelimit-remaining"] == "0"


async def hammer(
    urls: list[str], key: str, seconds: float
) -> list[tuple[float, int, int, httpx.Headers]]:
    """Eight clients, alternating between the processes, for ``seconds``: (sent at, status,
    which process, headers) per request."""
    answers: list[tuple[float, int, int, httpx.Headers]] = []
    end = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {key}"}
    last_answer = [0.0]

    async def client(n: int) -> None:
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            while time.monotonic() < end:
                which = (n + len(answers)) % len(urls)
                sent = time.monotonic()
                response = await http.get(f"{urls[which]}/domains")
                answers.append((sent, response.status_code, which, response.headers))
                last_answer[0] = max(last_answer[0], time.monotonic())

    await asyncio.gather(*(client(n) for n in range(8)))
    # The window the server may have accepted in: the first send to the last answer.
    answers.append((last_answer[0], 0, -1, httpx.Headers()))
    return answers
