"""``python -m bench.lone_delivery``: a delivery worker's CPU per email when each email is a batch
of its own (mail trickling in), measured in the worker's own process.

``bench.trickle`` measures the whole ``posthaste serve`` tree at a paced rate; on a shared box
its figures vary by ±20 % between runs of the same code. Here only the worker's part runs, and
only the worker's process is measured: ``--emails`` emails are accepted first (batches of 100,
one DKIM-signed sender, as ``bench.delivery``), then the real ``Worker`` (``make_worker``,
claims of one job, so every email is a claim, a start, a message read, a send to the sink and
a finish of its own, as a lone email is) delivers them one after another until none is due
(``run_until_idle``). Reported per email: the process's CPU (``time.process_time``) while the
worker ran, the CPU of the bench database's PostgreSQL backends meanwhile, and the statements
SQLAlchemy executed (statements sent to asyncpg directly are not counted there).

``--baseline DIR`` runs another checkout's ``src`` the same way, alternating round by round,
each run in a fresh process, database and sink.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from sqlalchemy import event

from bench import cpu, payload, sink
from bench.delivery import bench_settings, build
from bench.server import Backend, free_port, prepared, pythonpath
from posthaste.bootstrap import migrate
from posthaste.core.api_keys import NewApiKey
from posthaste.core.ids import now_ms
from posthaste.core.models import KeyMode, Origin
from posthaste.core.send_request import parse_send_request

BATCH = 100
WARMUP = 50


async def accept(services: Any, sender: Any, emails: int) -> None:
    for start in range(0, emails, BATCH):
        requests = [
            parse_send_request(payload.email(i), now_ms())
            for i in range(start, min(emails, start + BATCH))
        ]
        await services.sending.accept_batch(sender, Origin.BATCH, requests)


async def measure(backend: Backend, emails: int) -> dict[str, Any]:
    port = free_port()
    with sink.running(port):
        settings = bench_settings(backend.server_database_url, backend.data_dir, port)
        await migrate(settings)
        services = build(settings)
        try:
            team = await services.teams.create_team("bench", 0, 0)
            key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.LIVE))
            principal = await services.api_keys.authenticate(key.token)
            worker = services.make_worker(batch_size=1)
            statements = [0]

            def counted(*_: Any) -> None:
                statements[0] += 1

            event.listen(services.db.engine.sync_engine, "before_cursor_execute", counted)
            begun = _count_transactions()
            await accept(services, principal.sender, WARMUP)
            await worker.run_until_idle()  # warm: connections, caches, kept statements
            await accept(services, principal.sender, emails)
            backends = {pid: cpu.process_seconds(pid) for pid in cpu.postgres_pids()}
            statements[0] = 0
            begun[0] = 0
            wall, used = time.perf_counter(), time.process_time()
            done = await worker.run_until_idle()
            used, wall = time.process_time() - used, time.perf_counter() - wall
            count, transactions = statements[0], begun[0]
            own_db = await cpu.database_backends_seconds(services.db, backends)
        finally:
            await services.close()
    return {
        "emails": done,
        "worker_cpu_ms": 1000 * used / done,
        "db_cpu_ms": 1000 * own_db / done,
        "wall_ms": 1000 * wall / done,
        "sqlalchemy_statements": count / done,
        "transactions": transactions / done,
        "load_avg": os.getloadavg()[0],
    }


def _count_transactions() -> list[int]:
    """Count the transactions begun on PostgreSQL (SQLAlchemy's asyncpg adapter begins each,
    also for statements sent to asyncpg itself: ``Tx.fetch_pg``)."""
    begun = [0]
    try:
        from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection as cls
    except ImportError:  # pragma: no cover - asyncpg is a dependency
        return begun
    start: Any = cls._start_transaction

    async def counted(self: Any) -> None:
        begun[0] += int(self.isolation_level != "autocommit")
        await start(self)

    setattr(cls, "_start_transaction", counted)  # noqa: B010
    return begun


def run_one(backend: str, emails: int, code: Path | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": pythonpath(code)}
    args = [sys.executable, "-m", "bench.lone_delivery", "--one", backend, "--emails", str(emails)]
    done = subprocess.run(args, env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lone_delivery", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--emails", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, run in alternation")
    parser.add_argument("--one", metavar="BACKEND", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        with (
            tempfile.TemporaryDirectory(prefix="posthaste-bench-lone-") as workdir,
            prepared(args.one, Path(workdir)) as backend,
        ):
            result = uvloop.run(measure(backend, args.emails))
        print(json.dumps(result))
        return 0
    codes: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.baseline is not None:
        codes.append((str(args.baseline), args.baseline.resolve() / "src"))
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in codes}
    print(
        "| round | code | worker CPU ms/email | own db CPU ms/email | wall ms/email "
        "| statements through SQLAlchemy/email | transactions/email | load |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for round_ in range(1, args.rounds + 1):
        for label, code in codes if round_ % 2 else codes[::-1]:
            found = run_one(args.backend, args.emails, code)
            rows[label].append(found)
            print(
                f"| {round_} | {label} | {found['worker_cpu_ms']:.2f} | {found['db_cpu_ms']:.2f} "
                f"| {found['wall_ms']:.2f} | {found['sqlalchemy_statements']:.1f} "
                f"| {found['transactions']:.2f} "
                f"| {found['load_avg']:.1f} |",
                flush=True,
            )
    for label, runs in rows.items():
        median = statistics.median(r["worker_cpu_ms"] for r in runs)
        print(f"{label}: median worker CPU {median:.2f} ms/email")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
