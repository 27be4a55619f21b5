"""``python -m bench.lone_sends``: lone ``POST /emails`` while other clients flood the batch API.

``posthaste serve`` in the API role on PostgreSQL (``bench.server.running``: a fresh database,
a team without rate limit and its test key; no workers, so nothing is delivered and the API
process has the box to itself), then for
``--seconds`` (after two unmeasured): ``--clients`` clients each posting ``POST /emails/batch``
of 100 emails back to back, and ``POST /emails`` paced at ``--rate`` per second (open loop,
latency from the scheduled send time: ``bench/load.py``). Reported per run: p50/p99 of the lone
sends, the batch emails accepted per second meanwhile, and the CPU of the server process and
of its database's backends per request of the window (lone sends and batch requests;
``--clients 0``: per lone send, the figure to compare when cutting the cost of a request). With
``--baseline DIR`` (another
checkout's ``src``) each round runs that code first, then this checkout's, each on a fresh
server and database. One line per run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench import cpu, load, payload
from bench.serve import _database_cpu
from bench.server import Server, prepared, running
from bench.stats import Measurement

THIS = "this checkout"


class Spent:
    """CPU seconds of the server process and of its database's backends over a window."""

    def __init__(self, pid: int, database_url: str) -> None:
        self.pid = pid
        self.database_url = database_url
        self.server = 0.0
        self.database = 0.0

    async def begin(self, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        self.server = -cpu.process_seconds(self.pid)
        self.database = -sum((await _database_cpu(self.database_url)).values())

    async def end(self) -> None:
        self.server += cpu.process_seconds(self.pid)
        # Backends the window's first reading saw and that are gone now are not counted; the
        # server keeps its pool's connections, so none goes.
        self.database += sum((await _database_cpu(self.database_url)).values())


async def measure(server: Server, database_url: str, args: argparse.Namespace) -> str:
    url, key = server.urls[0], server.key
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    batch = orjson.dumps([payload.email(i) for i in range(100)])
    stop = asyncio.Event()
    accepted = 0
    batches = 0
    spent = Spent(server.pids[0], database_url)
    begin = time.perf_counter()
    start = begin + 2
    async with aiohttp.ClientSession() as http:

        async def flood() -> None:
            nonlocal accepted, batches
            while not stop.is_set():
                async with http.post(url + "/emails/batch", data=batch, headers=headers) as a:
                    await a.read()
                    accepted += 100 if a.status == 200 else 0
                    batches += 1 if start <= time.perf_counter() <= start + args.seconds else 0

        target = load.Target([url + "/emails"], key, payload.single_bodies(), load.count_single)
        floods = [asyncio.create_task(flood()) for _ in range(args.clients)]
        opening = asyncio.create_task(spent.begin(start))
        outcome = await load.open_loop(target, args.rate, (start, start + args.seconds))
        await opening
        await spent.end()
        stop.set()
        await asyncio.gather(*floods)
        elapsed = time.perf_counter() - begin
    requests = outcome.scheduled + batches
    lone = Measurement.of(
        "lone", "http", outcome.recorder, concurrency=0, emails_per_request=1, window_start=start
    )
    return (
        f"lone sends {lone.requests_per_s:.0f}/s, p50 {lone.p50_ms:.1f} ms, "
        f"p99 {lone.p99_ms:.1f} ms, errors {lone.errors or 0}; "
        f"batches {accepted / elapsed:,.0f} emails/s; per request: server "
        f"{1e6 * spent.server / requests:.0f} µs, "
        f"database {1e6 * spent.database / requests:.0f} µs "
        f"({requests} requests, load {os.getloadavg()[0]:.1f})"
    )


def run(code: str, args: argparse.Namespace) -> str:
    """One run of ``code`` (another checkout's ``src``, or this checkout's) on a fresh server
    and database: ``bench.server.running`` starts ``serve`` in the API role with a test key."""
    os.environ["POSTHASTE_BENCH_SERVER_SRC"] = "" if code == THIS else code
    with (
        tempfile.TemporaryDirectory() as workdir,
        prepared("postgres", Path(workdir)) as backend,
        running(backend) as server,
    ):
        database_url = backend.server_database_url
        return f"{code}: " + asyncio.run(measure(server, database_url, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=50.0, help="lone sends per second")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=8, help="batch clients")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", help="another checkout's src, run first in each round")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for code in ([args.baseline] if args.baseline else []) + [THIS]:
            print(run(code, args), flush=True)


if __name__ == "__main__":
    main()
