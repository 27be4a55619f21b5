"""``python -m bench.relay_serve``: only ``bench.serve``'s relay step, and where its CPU goes.

``posthaste serve`` as ``bench.serve`` starts it (defaults; ``acme.test`` verified, so every
message is DKIM-signed), then ``--rounds`` times: ``--messages`` of the relay's message over 16
connections with STARTTLS and AUTH, until the sink has them all (``serve.relay_end_to_end``).
Per round, per message: the CPU of each process of the server's tree by its role (the
supervisor, the front process, each worker), of the server database's own backends and of
this load generator, and the database's transactions (``pg_stat_database``, PostgreSQL only).
With ``--baseline DIR`` (another checkout's ``src``) each round runs that code first, then this
checkout's, each on a fresh server and database: old and new in alternation, as a loaded box
needs. One JSON line per round; a relay step of 3,000 messages takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

from bench import cpu, serve
from bench.trickle import role_of, transactions

STATS_LAG = 1.2  # seconds: after the relay step every backend is idle, and reports within one


def own_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


async def one_round(run: serve.Run, messages: int) -> dict[str, Any]:
    pids = cpu.tree_pids(run.serve.pid)
    url = run.serve.database_url
    xacts = await transactions(url, STATS_LAG)
    before = {pid: cpu.process_seconds(pid) for pid in pids}
    database = await serve._database_cpu(url)
    mine = own_seconds()
    relayed = await serve.relay_end_to_end(run, messages)
    mine = own_seconds() - mine
    after = {pid: cpu.process_seconds(pid) for pid in pids}
    database_after = await serve._database_cpu(url)
    xacts = await transactions(url, STATS_LAG) - xacts
    count = relayed["messages"]
    by_role: dict[str, float] = {}
    for pid in pids:
        role = "supervisor" if pid == run.serve.pid else role_of(pid)
        key = role if role not in by_role else f"{role} ({pid})"
        by_role[key] = round(1000 * (after[pid] - before[pid]) / count, 3)
    db_seconds = sum(t - database.get(pid, 0.0) for pid, t in database_after.items())
    return {
        "messages": count,
        "errors": relayed["errors"],
        "per_s": relayed["per_s"],
        "tree_cpu_ms": relayed["server_cpu_ms"],
        "by_role_cpu_ms": by_role,
        "database_cpu_ms": round(1000 * db_seconds / count, 3) if url else None,
        "load_generator_cpu_ms": round(1000 * mine / count, 3),
        "transactions_per_message": round(xacts / count, 3) if url else None,
        "cpu_pct": relayed["cpu_pct"],
        "load_average": round(os.getloadavg()[0], 1),
    }


async def measured(serving: tuple[serve.Around, serve.Serve], messages: int) -> dict[str, Any]:
    around, started = serving
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = serve.Run(started, around.sink_port, around.sink_pid, around.zone, http)
        await serve.set_up(run)
        return await one_round(run, messages)


def run_once(backend: str, messages: int, code: Path | None) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="posthaste-bench-relay-") as workdir,
        serve.serving(backend, Path(workdir) / backend, code=code) as serving,
    ):
        return uvloop.run(measured(serving, messages))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_serve", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="another checkout's src, run first")
    args = parser.parse_args(argv)
    codes: list[Path | None] = [None] if args.baseline is None else [args.baseline, None]
    for _ in range(args.rounds):
        for code in codes:
            started = time.strftime("%H:%M:%S")
            figures = run_once(args.backend, args.messages, code)
            label = "this checkout" if code is None else str(code)
            print(json.dumps({"code": label, "started": started, **figures}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
