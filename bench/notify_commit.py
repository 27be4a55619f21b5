"""``python -m bench.notify_commit``: what a ``NOTIFY`` inside a writing transaction costs.

PostgreSQL takes one lock on its notification queue before a notifying transaction's commit
record and holds it until the transaction ends, WAL flush included: the commits of notifying
transactions run one at a time across the cluster. This runs ``pgbench`` (PostgreSQL's own
load generator, installed with the server) against a scratch database, three scripts in
alternating rounds, each a small INSERT (a row of ~200 bytes):

- ``insert``: the INSERT alone (autocommit);
- ``insert+notify``: the INSERT and ``pg_notify`` in one statement, one transaction (what
  Posthaste sent until 2026-11-29: the wake-ups in the storing statement or transaction);
- ``insert, then notify``: the INSERT, then ``pg_notify`` as a statement of its own (what
  ``dialects.Notifier`` sends now, after the commit; here one per INSERT, the worst case:
  the notifier sends one per round trip whatever the commit rate).

Commits per second with ``--clients`` connections (16), ``--seconds`` per round (8).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path

import asyncpg

SCRIPTS = {
    "insert": "INSERT INTO t (v) VALUES (repeat('x', 200));\n",
    "insert+notify": (
        "WITH i AS (INSERT INTO t (v) VALUES (repeat('x', 200)) RETURNING 1)"
        " SELECT pg_notify('bench', '') FROM i;\n"
    ),
    "insert, then notify": (
        "INSERT INTO t (v) VALUES (repeat('x', 200));\nSELECT pg_notify('bench', '');\n"
    ),
}
DATABASE = "posthaste_bench_notify"


def _pgbench() -> str:
    found = shutil.which("pgbench")
    if found:
        return found
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True)
    if not installed:
        raise SystemExit("pgbench not found (it comes with the postgresql package)")
    return str(installed[0])


async def _admin(dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def _round(pgbench: str, host: str, user: str, script: Path, clients: int, seconds: int) -> float:
    command = [pgbench, "-h", host, "-U", user, "-n", "-c", str(clients), "-j", "2"]
    command += ["-T", str(seconds), "-f", str(script), DATABASE]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    raise RuntimeError(f"no tps in pgbench's output:\n{out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--user", default="postgres")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pgbench = _pgbench()
    admin = f"postgresql://{args.user}@{args.host}/postgres"
    asyncio.run(_admin(admin, f"DROP DATABASE IF EXISTS {DATABASE}", f"CREATE DATABASE {DATABASE}"))
    scratch = f"postgresql://{args.user}@{args.host}/{DATABASE}"
    asyncio.run(_admin(scratch, "CREATE TABLE t (id bigserial PRIMARY KEY, v text)"))
    results: dict[str, list[float]] = {name: [] for name in SCRIPTS}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                for name, sql in SCRIPTS.items():
                    script = Path(tmp) / "script.sql"
                    script.write_text(sql)
                    tps = _round(pgbench, args.host, args.user, script, args.clients, args.seconds)
                    results[name].append(tps)
                    print(f"{name:>20}: {tps:8,.0f} commits/s", flush=True)
    finally:
        asyncio.run(_admin(admin, f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))
    for name, runs in results.items():
        print(f"{name:>20}: " + ", ".join(f"{tps:,.0f}" for tps in runs) + " commits/s")


if __name__ == "__main__":
    main()
