"""``python -m bench.lone_sends``: lone ``POST /emails`` while other clients flood the batch API.

``posthaste serve --role api`` on PostgreSQL (a fresh database; no workers, so nothing is
delivered and the API process has the box to itself), its bootstrap test key, then for
``--seconds`` (after two unmeasured): ``--clients`` clients each posting ``POST /emails/batch``
of 100 emails back to back, and ``POST /emails`` paced at ``--rate`` per second (open loop,
latency from the scheduled send time: ``bench/load.py``). Reported per run: p50/p99 of the lone
sends, and the batch emails accepted per second meanwhile. With ``--baseline DIR`` (another
checkout's ``src``) each round runs that code first, then this checkout's, each on a fresh
server and database. One line per run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import asyncpg
import orjson
from tests.ports import free_port

from bench import load, payload
from bench.stats import Measurement

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
THIS = str(Path(__file__).parents[1] / "src")


async def _ready(
    http: aiohttp.ClientSession, url: str, process: asyncio.subprocess.Process
) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise RuntimeError("the server exited early (its log: serve.log in its data dir)")
        try:
            async with http.get(url + "/readyz") as answer:
                if answer.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the server did not become ready")


def _test_key(data_dir: Path) -> str:
    for line in (data_dir / "bootstrap-keys.txt").read_text().splitlines():
        mode, _, token = line.partition(" key: ")
        if token and "test" in mode.lower():
            return token.strip()
    raise RuntimeError("no test key in bootstrap-keys.txt")


async def run(src: str, args: argparse.Namespace) -> str:
    name = "lone_" + uuid.uuid4().hex[:8]
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f"CREATE DATABASE {name}")
    data_dir = Path(tempfile.mkdtemp(prefix="posthaste-lone-"))
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": src,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_HTTP_PORT": str(port),
        "POSTHASTE_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{name}",
        "POSTHASTE_SECRET_KEY": "b" * 40,
        "POSTHASTE_SMTP_RELAY_PORT": "0",
        "POSTHASTE_SMTP_RELAY_TLS_PORT": "0",
        "POSTHASTE_SMTP_INBOUND_PORT": "0",
    }
    command = [sys.executable, "-m", "posthaste.cli", "serve", "--role", "api"]
    log = (data_dir / "serve.log").open("wb")  # the server's own lines, if it fails
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=subprocess.DEVNULL, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            await _ready(http, url, process)
            key = _test_key(data_dir)
            headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            batch = orjson.dumps([payload.email(i) for i in range(100)])
            stop = asyncio.Event()
            accepted = 0

            async def flood() -> None:
                nonlocal accepted
                while not stop.is_set():
                    async with http.post(url + "/emails/batch", data=batch, headers=headers) as a:
                        await a.read()
                        accepted += 100 if a.status == 200 else 0

            target = load.Target([url + "/emails"], key, payload.single_bodies(), load.count_single)
            floods = [asyncio.create_task(flood()) for _ in range(args.clients)]
            begin = time.perf_counter()
            start = begin + 2
            outcome = await load.open_loop(target, args.rate, (start, start + args.seconds))
            stop.set()
            await asyncio.gather(*floods)
            elapsed = time.perf_counter() - begin
            lone = Measurement.of(
                "lone", "http", outcome.recorder, concurrency=0, emails_per_request=1,
                window_start=start,
            )  # fmt: skip
            return (
                f"{src}: lone sends {lone.requests_per_s:.0f}/s, p50 {lone.p50_ms:.1f} ms, "
                f"p99 {lone.p99_ms:.1f} ms, errors {lone.errors or 0}; "
                f"batches {accepted / elapsed:,.0f} emails/s"
            )
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)
        log.close()
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=50.0, help="lone sends per second")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=8, help="batch clients")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", help="another checkout's src, run first in each round")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for src in ([args.baseline] if args.baseline else []) + [THIS]:
            print(await run(src, args), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
