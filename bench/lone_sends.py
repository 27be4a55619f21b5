"""``python -m bench.lone_sends``: lone ``POST /emails`` while other clients flood the batch API.

``posthaste serve`` in the API role on PostgreSQL (``bench.server.running``: a fresh database,
a team without rate limit and its test key; no workers, so nothing is delivered and the API
process has the box to itself), then for
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
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench import load, payload
from bench.server import prepared, running
from bench.stats import Measurement

THIS = "this checkout"


async def measure(url: str, key: str, args: argparse.Namespace) -> str:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    batch = orjson.dumps([payload.email(i) for i in range(100)])
    stop = asyncio.Event()
    accepted = 0
    async with aiohttp.ClientSession() as http:

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
        "lone", "http", outcome.recorder, concurrency=0, emails_per_request=1, window_start=start
    )
    return (
        f"lone sends {lone.requests_per_s:.0f}/s, p50 {lone.p50_ms:.1f} ms, "
        f"p99 {lone.p99_ms:.1f} ms, errors {lone.errors or 0}; "
        f"batches {accepted / elapsed:,.0f} emails/s"
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
        return f"{code}: " + asyncio.run(measure(server.urls[0], server.key, args))


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
