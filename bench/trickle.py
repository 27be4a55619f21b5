"""``python -m bench.trickle``: the CPU ``posthaste serve`` spends per email when mail trickles in.

``posthaste serve`` as a user starts it (``bench/serve.py``: defaults; only ports, the database
URL and delivery to a counting sink set), one domain verified, then for each ``--rate`` (50/s
and 200/s): ``POST /emails`` on a fixed schedule (open loop, latency from the scheduled send
time: ``bench/load.py``), ``--warmup`` seconds unmeasured, then ``--emails`` single emails, each
waited for at the sink. Reported per rate: p50/p99 of the measured requests, and the CPU spent
per email from the first measured request until the sink has the last one: the server's process
tree (every process of it, reaped ones included, from ``/proc``), the server database's own
PostgreSQL backends, and every ``postgres`` process of the box (WAL writer and the rest).

``--baseline DIR`` runs another checkout's code (its ``src``) the same way, alternating with
this one round by round (``--rounds``), so that before and after share the machine's state;
each round starts a fresh server and database. Prints a markdown table and writes
``bench/results/trickle-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import uvloop

from bench import cpu, load, payload, report
from bench.serve import RESULTS, Run, Serve, _database_cpu, serving, set_up
from bench.stats import Measurement

THIS = "this checkout"


# A PostgreSQL 15 backend reports its counts to pg_stat_database when it goes idle, at most
# once a second, else after 10 s idle: read them once every backend has been idle that long.
STATS_LAG = 11.0


async def transactions(url: str, lag: float = STATS_LAG) -> int:
    """Transactions the server's database has ended so far (PostgreSQL; 0 on SQLite), read
    after ``lag`` seconds (the server must be at rest meanwhile)."""
    if not url:
        return 0
    await asyncio.sleep(lag)
    conn = await asyncpg.connect(url, timeout=10)
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await conn.fetchrow(
            "SELECT xact_commit + xact_rollback AS ended FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return int(row["ended"]) if row else 0


def role_of(pid: int) -> str:
    """A tree process's ``--role`` (``supervisor`` for the root, ``serve`` for one process)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return "gone"
    if "--role" in words:
        return words[words.index("--role") + 1]
    if "--supervised-prepare" in words:
        return "prepare"
    return "supervisor" if any(w.startswith("--supervised") for w in words) else "serve"


def by_role(root: int) -> dict[str, float]:
    """CPU seconds so far of the tree's live processes, summed by role."""
    found: dict[str, float] = {}
    for pid in cpu.tree_pids(root):
        role = "supervisor" if pid == root and len(cpu.tree_pids(root)) > 1 else role_of(pid)
        found[role] = found.get(role, 0.0) + cpu.process_seconds(pid)
    return found


async def idle(run: Run, seconds: float) -> dict[str, float]:
    """CPU ms per second of the tree's processes by role, and of the database, while idle."""
    database_before = await _database_cpu(run.serve.database_url)
    before, start = by_role(run.serve.pid), time.perf_counter()
    await asyncio.sleep(seconds)
    after, wall = by_role(run.serve.pid), time.perf_counter() - start
    database_after = await _database_cpu(run.serve.database_url)
    spent = {role: 1000 * (t - before.get(role, 0.0)) / wall for role, t in after.items()}
    database = sum(t - database_before.get(pid, 0.0) for pid, t in database_after.items())
    spent["own db"] = 1000 * database / wall
    return {role: round(ms, 1) for role, ms in spent.items()}


async def paced(run: Run, rate: float, emails: int, warmup: float) -> dict[str, Any]:
    """``warmup`` seconds at ``rate``, delivered; then ``emails`` at ``rate`` until delivered."""
    bodies = payload.single_bodies()
    target = load.Target([run.serve.url + "/emails"], run.serve.live_key, bodies, load.count_single)
    if warmup > 0:
        start = time.perf_counter()
        warm = await load.open_loop(target, rate, (start, start + warmup))
        run.expected += warm.recorder.accepted
        await run.drained()
    groups = {"sink": [run.sink_pid]}
    trees = {"server": run.serve.pid}
    database_before = await _database_cpu(run.serve.database_url)
    ended_before = await transactions(run.serve.database_url)
    roles_before = by_role(run.serve.pid)
    before = cpu.snapshot(groups, trees)
    start = time.perf_counter()
    outcome = await load.open_loop(target, rate, (start, start + emails / rate))
    accepted = outcome.recorder.accepted
    run.expected += accepted
    await run.drained()
    after = cpu.snapshot(groups, trees)
    roles_after = by_role(run.serve.pid)
    database_after = await _database_cpu(run.serve.database_url)
    ended = await transactions(run.serve.database_url) - ended_before
    if not accepted:
        raise RuntimeError(f"nothing accepted: {dict(outcome.recorder.errors)}")
    measured = Measurement.of(
        f"POST /emails at {rate:g}/s",
        "http",
        outcome.recorder,
        concurrency=0,
        emails_per_request=1,
        window_start=start,
    )
    database = sum(t - database_before.get(pid, 0.0) for pid, t in database_after.items())
    per_email = 1000 / accepted

    def spent(label: str) -> float:
        return round(per_email * (after.processes[label] - before.processes[label]), 3)

    return {
        "rate": rate,
        "emails": accepted,
        "errors": measured.errors,
        "p50_ms": round(measured.p50_ms, 2),
        "p99_ms": round(measured.p99_ms, 2),
        "max_ms": round(measured.max_ms, 2),
        "max_dispatch_lag_ms": round(outcome.max_dispatch_lag_ms, 2),
        "tree_cpu_ms": spent("server"),
        "database_cpu_ms": round(per_email * database, 3),
        "postgres_cpu_ms": spent("postgres"),
        "sink_cpu_ms": spent("sink"),
        # The server's own reads of the stats (two) and anything at rest meanwhile included.
        "transactions_per_email": round(ended / accepted, 2),
        "by_role_cpu_ms": {
            role: round(per_email * (t - roles_before.get(role, 0.0)), 3)
            for role, t in roles_after.items()
        },
        "seconds": round(after.wall - before.wall, 2),
        "processes": len(cpu.tree_pids(run.serve.pid)),
    }


async def measure(
    serve: Serve, sink_port: int, sink_pid: int, zone: Any, args: argparse.Namespace
) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = Run(serve, sink_port, sink_pid, zone, http)
        await set_up(run)
        resting = await idle(run, args.idle)
        print(f"  at rest, CPU ms per second: {resting}", flush=True)
        figures = [await paced(run, rate, args.emails, args.warmup) for rate in args.rates]
        for item in figures:
            item["at_rest_cpu_ms_per_s"] = resting
        return figures


def run_once(
    backend_name: str, args: argparse.Namespace, workdir: Path, code: Path | None
) -> list[dict[str, Any]]:
    with serving(backend_name, workdir, code=code) as (around, serve):
        return uvloop.run(measure(serve, around.sink_port, around.sink_pid, around.zone, args))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| backend | code | rate | round | p50 ms | p99 ms | tree CPU ms/email | own db "
        "| all postgres | tree + own db | load avg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for item in results:
        rows.append(
            f"| {item['backend']} | {item['code']} | {item['rate']:g}/s | {item['round']} | "
            f"{item['p50_ms']:.1f} | {item['p99_ms']:.1f} | {item['tree_cpu_ms']:.2f} | "
            f"{item['database_cpu_ms']:.2f} | {item['postgres_cpu_ms']:.2f} | "
            f"{item['tree_cpu_ms'] + item['database_cpu_ms']:.2f} | {item['load_avg']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trickle", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--rates", type=float, nargs="+", default=[50.0, 200.0])
    parser.add_argument("--emails", type=int, default=1500, help="measured emails per rate")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds at the rate first")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds measured at rest first")
    parser.add_argument(
        "--baseline", type=Path, default=None, help="another checkout, run in alternation"
    )
    parser.add_argument(
        "--baseline-only", action="store_true", help="run only --baseline's code (to profile it)"
    )
    args = parser.parse_args(argv)
    codes: list[tuple[str, Path | None]] = [] if args.baseline_only else [(THIS, None)]
    if args.baseline is not None:
        codes.append((str(args.baseline), args.baseline.resolve() / "src"))
    stamp = time.strftime("%Y%m%dT%H%M%S")
    results: list[dict[str, Any]] = []
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-trickle-") as workdir:
        for round_ in range(1, args.rounds + 1):
            for name in backends:
                # Alternate which code goes first, so neither always meets the warmer box.
                for label, src in codes if round_ % 2 else codes[::-1]:
                    print(f"[round {round_}] {name}, {label} ...", flush=True)
                    where = Path(workdir) / f"{name}-{round_}-{len(results)}"
                    figures = run_once(name, args, where, src)
                    for item in figures:
                        item |= {"backend": name, "code": label, "round": round_}
                        item["load_avg"] = load_average()
                        results.append(item)
                    print(table(results[-len(figures) :]), flush=True)
                    for item in figures:
                        print(
                            f"  {item['rate']:g}/s by role: {item['by_role_cpu_ms']}, "
                            f"transactions per email {item['transactions_per_email']}"
                        )
    print("\n" + table(results))
    document = {
        "command": shlex.join(["python", "-m", "bench.trickle", *(argv or sys.argv[1:])]),
        "started": stamp,
        "machine": report.machine("uvloop"),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "results": results,
    }
    path = RESULTS / f"trickle-{stamp}.json"
    report.write_json(path, document)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
