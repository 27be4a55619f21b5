"""``python -m bench.large_messages``: the API's memory under many large emails at once.

A real ``posthaste serve --role api`` (one process, SQLite unless ``--backend postgres``) takes
``--concurrency`` simultaneous ``POST /emails`` of about 23.8 MB each (a 17 MiB attachment,
base64 in JSON), first with the default ``POSTHASTE_REQUEST_MEMORY`` (100 MiB), then, for
comparison, with a budget large enough never to queue anything (what the server did before the
budget). Reported per run: the server's RSS before, at its peak (sampled every 20 ms from
/proc) and after; answers by status; the wall time. Writes ``bench/results/large-<ts>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import aiohttp
import orjson

from bench import server

RESULTS = Path(__file__).resolve().parent / "results"
ATTACHMENT = 17 * 1024 * 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            self.done.wait(0.02)


async def blast(url: str, key: str, concurrency: int) -> Counter[int]:
    payload = base64.b64encode(os.urandom(ATTACHMENT)).decode()
    body = orjson.dumps(
        {
            "from": "bench@acme.test",
            "to": "delivered@simulator.test",
            "subject": "Large",
            "text": "attached",
            "attachments": [{"filename": "big.bin", "content": payload}],
        }
    )
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as http:

        async def one() -> int:
            try:
                async with http.post(f"{url}/emails", data=body, headers=headers) as answer:
                    await answer.read()
                    return answer.status
            except aiohttp.ClientError:
                return -1  # the connection broke (a killed server breaks every one)

        return Counter(await asyncio.gather(*(one() for _ in range(concurrency))))


def run(backend_name: str, concurrency: int, budget: str) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory() as workdir,
        server.prepared(backend_name, Path(workdir)) as backend,
        server.running(backend, extra_env={"POSTHASTE_REQUEST_MEMORY": budget}) as up,
    ):
        pid = up.pids[0]
        before = rss_mib(pid)
        sampler = Sampler(pid)
        sampler.start()
        started = time.perf_counter()
        answers = asyncio.run(blast(up.urls[0], up.key, concurrency))
        wall = time.perf_counter() - started
        sampler.done.set()
        sampler.join()
        alive = up.processes[0].poll() is None
        after = rss_mib(pid) if alive else 0.0
    return {
        "backend": backend_name,
        "budget": budget,
        "concurrency": concurrency,
        "rss_before_mib": round(before),
        "rss_peak_mib": round(sampler.peak),
        "rss_after_mib": round(after),
        "answers": dict(answers),
        "server_alive": alive,
        "wall_s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    rows = [run(args.backend, args.concurrency, budget) for budget in ("100MiB", "100GiB")]
    print("| budget | requests at once | RSS before | peak | after | answers | wall |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for row in rows:
        print(
            f"| {row['budget']} | {row['concurrency']} | {row['rss_before_mib']} MiB | "
            f"{row['rss_peak_mib']} MiB | {row['rss_after_mib']} MiB | {row['answers']} | "
            f"{row['wall_s']} s |"
        )
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RESULTS / f"large-{stamp}.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
