"""``python -m bench.automations``: many contacts created in one import, each starting a run of
``contact.created → delay → send_email``, on SQLite or PostgreSQL.

- The pipeline's rate first, as the baseline: as many plain emails (the same addresses,
  subjects and text) all due at once, posted to ``POST /emails/batch`` (in process, 100 a
  request, 4 requests at a time) and delivered (capture) by the same worker process.
- The import: one transaction inserts the contacts and calls ``start_for_contacts`` (what the
  contact import calls), which stores every run, its first step, its ``automation.run.started``
  event and its job in a few statements.
- While the runs wait: a real ``posthaste serve --role worker`` process; its resident memory and
  the queue's jobs show that no process holds a timer per run (the delay is each job's due time).
- Once the delays fall due together: for each email, the lag from its due time (its run's delay
  ending; for the baseline, the first POST) to accepted (the email stored) and to delivered (its
  ``email.delivered`` event), p50 and p99, and emails delivered per second, beside the
  baseline's.
- In process, afterwards: what one send step asks of the database. ``--statements`` runs of
  ``contact.created → send_email`` are executed by a worker loop in this process (one claimed
  batch at a time) while SQLAlchemy's events count every statement and commit; with
  ``--compare``, once with each claimed batch in one transaction and once each job in its own,
  in alternating order, with the same number of runs.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event, func, select
from sqlalchemy.orm import aliased

from bench import cpu
from bench.server import SECRET_KEY, prepared, pythonpath
from bench.stats import percentile
from posthaste.api.app import create_app
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.automations import parse_new_automation
from posthaste.core.contacts import Contact
from posthaste.core.durations import parse_duration
from posthaste.core.ids import new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import KeyMode, Principal
from posthaste.services.automation_runs import start_for_contacts
from posthaste.storage import bulk
from posthaste.storage.tables import (
    automation_run_steps,
    automation_runs,
    contacts,
    emails,
    events,
    jobs,
)
from posthaste.workers.runner import Worker

MAIL = {
    "key": "mail",
    "type": "send_email",
    "config": {
        "from": "hi@acme.test",
        "subject": "Hello {{contact.first_name}}",
        "text": "Your plan: {{contact.properties.plan}}",
    },
}
START = {"key": "start", "type": "trigger", "config": {"event": "contact.created"}}


def graph(delay: str | None) -> dict[str, Any]:
    """``contact.created → delay → send_email`` (without a delay: straight to the email)."""
    if delay is None:
        steps, links = [START, MAIL], [{"from": "start", "to": "mail"}]
    else:
        pause = {"key": "pause", "type": "delay", "config": {"duration": delay}}
        steps = [START, pause, MAIL]
        links = [{"from": "start", "to": "pause"}, {"from": "pause", "to": "mail"}]
    return {"name": "Bench", "status": "enabled", "steps": steps, "connections": links}


def contact_rows(team_id: str, count: int, now: int) -> list[Contact]:
    return [
        Contact(new_id(), team_id, f"c{n}@example.com", f"c{n}@example.com", f"C{n}", None,
                False, {"plan": "pro"}, now, now)
        for n in range(count)
    ]  # fmt: skip


async def imported(services: Services, team_id: str, count: int) -> float:
    """Seconds for one transaction creating ``count`` contacts and starting their runs."""
    now = now_ms()
    people = contact_rows(team_id, count, now)
    rows = [
        {"id": c.id, "team_id": c.team_id, "email": c.email, "email_key": c.email_key,
         "first_name": c.first_name, "last_name": None, "unsubscribed": False,
         "properties": c.properties, "created_at": now, "updated_at": now}
        for c in people
    ]  # fmt: skip
    started = time.perf_counter()
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, contacts, rows)
        await start_for_contacts(tx, team_id, people, now)
    return time.perf_counter() - started


class Spent:
    """CPU seconds used from its start: the worker's process tree, this process (the API in
    the baseline; polls otherwise) and, on PostgreSQL, the bench database's own backends."""

    def __init__(self, worker_pid: int) -> None:
        self.worker_pid = worker_pid
        self.worker = cpu.tree_seconds(worker_pid)
        self.bench = cpu.process_seconds(os.getpid())
        self.backends = {pid: cpu.process_seconds(pid) for pid in cpu.postgres_pids()}

    async def per_email_ms(self, services: Services, count: int) -> dict[str, float]:
        """CPU milliseconds per email of each, since the start."""
        spent = {
            "worker": cpu.tree_seconds(self.worker_pid) - self.worker,
            "bench": cpu.process_seconds(os.getpid()) - self.bench,
            "database": await cpu.database_backends_seconds(services.db, self.backends),
        }
        return {name: 1000 * seconds / count for name, seconds in spent.items()}


def delivered_count(team_id: str) -> Any:
    """The team's delivered emails, counted in its status index: a poll that costs next to
    nothing beside what it measures."""
    mine = (emails.c.team_id == team_id) & (emails.c.status == "delivered")
    return select(func.count()).select_from(emails).where(mine)


async def scalar(services: Services, query: Any) -> Any:
    async with services.db.read() as tx:
        return (await tx.conn.execute(query)).scalar()


async def reached(
    services: Services, count: Any, wanted: int, meanwhile: Callable[[], None] = lambda: None
) -> None:
    """Poll (5 times a second) until ``count`` reaches ``wanted``."""
    for _ in itertools.count():
        if await scalar(services, count) >= wanted:
            return
        meanwhile()
        await asyncio.sleep(0.2)


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "posthaste.cli", "serve", "--role", "worker"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def bench_team(services: Services) -> tuple[str, str, Principal]:
    """A new team with a test key: its id, the key's token and its principal."""
    team = await services.teams.create_team(f"bench-{new_id()[-12:]}", 0, 0)
    key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.TEST))
    return team.id, key.token, await services.api_keys.authenticate(key.token)


def plain_email(n: int) -> dict[str, Any]:
    """The email run ``n``'s send step makes, as a caller of ``POST /emails/batch`` writes it."""
    return {
        "from": "hi@acme.test",
        "to": [f"c{n}@example.com"],
        "subject": f"Hello C{n}",
        "text": "Your plan: pro",
    }


async def email_lags(services: Services, team_id: str, due: dict[str, int]) -> dict[str, Any]:
    """For the team's emails, each due at ``due[email_id]`` (epoch ms): the lag in seconds from
    due to accepted (the email stored) and to delivered (its ``email.delivered`` event)."""
    accepted_q = select(emails.c.id, emails.c.created_at).where(emails.c.team_id == team_id)
    delivered_q = select(events.c.email_id, events.c.created_at).where(
        events.c.team_id == team_id, events.c.type == "email.delivered"
    )
    async with services.db.read() as tx:
        accepted = {e: at for e, at in await tx.conn.execute(accepted_q)}
        delivered = {e: at for e, at in await tx.conn.execute(delivered_q)}
    to_accepted = sorted((accepted[e] - at) / 1000 for e, at in due.items())
    to_delivered = sorted((delivered[e] - at) / 1000 for e, at in due.items())
    span = (max(delivered[e] for e in due) - min(due.values())) / 1000
    return {
        "emails": len(due),
        "accepted_p50": percentile(to_accepted, 0.5),
        "accepted_p99": percentile(to_accepted, 0.99),
        "delivered_p50": percentile(to_delivered, 0.5),
        "delivered_p99": percentile(to_delivered, 0.99),
        "per_second": len(due) / max(span, 1e-3),
    }


async def plain_batch(
    services: Services, worker_pid: int, count: int, senders: int = 4
) -> dict[str, Any]:
    """The pipeline's rate: ``count`` plain emails, all due at once, through ``POST
    /emails/batch`` (100 a request, ``senders`` requests at a time) to the same worker."""
    team_id, token, _ = await bench_team(services)
    spent = Spent(worker_pid)
    chunks = [
        [plain_email(n) for n in range(first, min(first + 100, count))]
        for first in range(0, count, 100)
    ]
    transport = httpx.ASGITransport(app=create_app(services))
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://bench.test", headers=headers
    ) as http:

        async def sender() -> None:
            while chunks:
                response = await http.post("/emails/batch", json=chunks.pop())
                assert response.status_code == 200, response.text

        due = now_ms()
        await asyncio.gather(*(sender() for _ in range(senders)))
    await reached(services, delivered_count(team_id), count)
    cpu_ms = await spent.per_email_ms(services, count)
    async with services.db.read() as tx:
        ids = (await tx.conn.execute(select(emails.c.id).where(emails.c.team_id == team_id))).all()
    lags = await email_lags(services, team_id, {email_id: due for (email_id,) in ids})
    return {**lags, "cpu_ms": cpu_ms}


async def run_dues(services: Services, team_id: str, delay_ms: int) -> dict[str, int]:
    """Each run's email with the time its delay ended (its delay step's start + the delay)."""
    pause, mail = aliased(automation_run_steps), aliased(automation_run_steps)
    query = select(pause.c.started_at, mail.c.output).join(
        mail, (mail.c.run_id == pause.c.run_id) & (mail.c.key == "mail")
    )
    query = query.where(pause.c.team_id == team_id, pause.c.key == "pause")
    async with services.db.read() as tx:
        rows = (await tx.conn.execute(query)).all()
    return {output["email_id"]: started + delay_ms for started, output in rows}


async def measure(args: argparse.Namespace, database_url: str, data_dir: Path) -> dict[str, Any]:
    settings = Settings(
        database_url=database_url or f"sqlite:///{data_dir / 'posthaste.db'}",
        data_dir=data_dir,
        secret_key=SECRET_KEY,
        log_level="warning",
    )
    await migrate(settings)
    services = build_services(settings)
    try:
        result: dict[str, Any] = {"runs": 0}
        if args.runs:
            result = await _with_worker(args, settings, services, data_dir)
        if args.statements:
            batches = [int(size) for size in args.batch.split(",")]
            result["in_process"] = await in_process(
                services, args.statements, args.compare, batches
            )
        return result
    finally:
        await services.close()


async def _with_worker(
    args: argparse.Namespace, settings: Settings, services: Services, data_dir: Path
) -> dict[str, Any]:
    """The pipeline's rate for as many plain emails, then the ``--runs`` runs, executed by the
    same real worker process."""
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath(),
        "POSTHASTE_DATABASE_URL": settings.database_url,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_SECRET_KEY": SECRET_KEY,
        "POSTHASTE_DELIVERY": "capture",
        "POSTHASTE_LOG_LEVEL": "warning",
    }
    worker = start_worker(env, data_dir / "worker.log")
    try:
        await asyncio.sleep(3)  # the worker is up and idle
        idle = cpu.memory(cpu.tree_pids(worker.pid)).rss
        baseline = await plain_batch(services, worker.pid, args.runs)
        return {
            **await _runs(args, services, worker),
            "idle_rss_mib": idle / 2**20,
            "baseline": baseline,
        }
    finally:
        worker.terminate()
        worker.wait(30)


async def _runs(
    args: argparse.Namespace, services: Services, worker: subprocess.Popen[bytes]
) -> dict[str, Any]:
    team_id, _, principal = await bench_team(services)
    await services.automations.create(principal, parse_new_automation(graph(args.delay)))
    import_seconds = await imported(services, team_id, args.runs)
    started, imported_at = time.monotonic(), now_ms()
    waiting_rss = 0

    def sampled() -> None:
        nonlocal waiting_rss
        waiting_rss = max(waiting_rss, cpu.memory(cpu.tree_pids(worker.pid)).rss)

    mine = emails.c.team_id == team_id
    await reached(services, select(func.count()).where(mine), 1, sampled)
    spent = Spent(worker.pid)
    queued = await scalar(services, select(func.count()).select_from(jobs))
    await reached(services, delivered_count(team_id), args.runs)
    all_delivered = time.monotonic() - started
    cpu_ms = await spent.per_email_ms(services, args.runs)
    runs = automation_runs.c
    ended = select(func.count(), func.max(runs.completed_at)).where(
        runs.team_id == team_id, runs.status == "completed"
    )
    async with services.db.read() as tx:
        completed, last_completed = (await tx.conn.execute(ended)).one()
    assert completed == args.runs, (completed, args.runs)
    runs_done = (last_completed - imported_at) / 1000
    due = await run_dues(services, team_id, int(parse_duration(args.delay) * 1000))
    return {
        "runs": args.runs,
        "import_seconds": import_seconds,
        "waiting_rss_mib": waiting_rss / 2**20,
        "jobs_when_due": queued,
        "runs_done_seconds": runs_done,
        "delivered_seconds": all_delivered,
        "lags": {**await email_lags(services, team_id, due), "cpu_ms": cpu_ms},
    }


async def in_process(
    services: Services, runs: int, compare: bool, batches: list[int]
) -> list[dict[str, Any]]:
    """``runs`` send steps executed in this process, their statements and CPU counted, claimed
    ``batches[0]`` at a time; with several ``batches``, once with each size, then each again
    (so that a box getting busier or quieter weighs on each); with ``compare``, each batch in
    one transaction and each job on its own, alternating the same way."""
    sizes = [(True, size) for size in batches]
    if compare:
        sizes.append((False, batches[0]))
    return [await _counted_steps(services, runs, *mode) for mode in [*sizes, *sizes]]


async def _counted_steps(
    services: Services, runs: int, together: bool, batch: int
) -> dict[str, Any]:
    team_id, _, principal = await bench_team(services)
    await services.automations.create(principal, parse_new_automation(graph(None)))
    await imported(services, team_id, runs)
    services.automation_steps.together = together
    worker = Worker(
        services.db,
        {},
        lease_seconds=300,
        batch_size=batch,
        batch_handlers={JobKind.AUTOMATION_STEP: services.automation_steps.run_steps},
    )
    counts = {"statements": 0, "commits": 0}

    def statement(*_: Any) -> None:
        counts["statements"] += 1

    def commit(*_: Any) -> None:
        counts["commits"] += 1

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", commit)
    spent = Spent(os.getpid())
    started = time.perf_counter()
    try:
        executed = await worker.run_until_idle()
    finally:
        took = time.perf_counter() - started
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", commit)
        services.automation_steps.together = True
    cpu_ms = await spent.per_email_ms(services, runs)
    assert executed == runs, (executed, runs)
    return {
        "together": together,
        "batch": batch,
        "runs": runs,
        "seconds": took,
        "cpu_ms": cpu_ms,
        **counts,
    }


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if result["runs"]:
        _report_worker(args, result)
    measured = result.get("in_process", [])
    if measured:
        print(f"\nIn process ({args.backend}), one claimed batch at a time, "
              "contact.created → send_email:\n")  # fmt: skip
        print("| send steps | batch | statements per step | commits per step | steps/s | "
              "CPU ms per step: bench / database |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|")
    for item in measured:
        how = "batch in one transaction" if item["together"] else "each job on its own"
        count, spent = item["runs"], item["cpu_ms"]
        print(f"| {count:,} {how} | {item['batch']} | {item['statements'] / count:.1f} | "
              f"{item['commits'] / count:.2f} | {count / item['seconds']:,.0f} | "
              f"{spent['worker']:.2f} / {spent['database']:.2f} |")  # fmt: skip


def _report_worker(args: argparse.Namespace, result: dict[str, Any]) -> None:
    runs = result["runs"]
    print(f"\n{runs:,} runs (delay {args.delay} → send_email), {args.backend}, one worker role\n")
    print("| measurement | value |")
    print("|---|---:|")
    took = result["import_seconds"]
    print(f"| import: {runs:,} contacts + runs in one transaction | {took:.2f} s |")
    print(f"| worker RSS idle / while the runs wait | {result['idle_rss_mib']:.0f} / "
          f"{result['waiting_rss_mib']:.0f} MiB |")  # fmt: skip
    print(f"| jobs in the queue when the delays fell due | {result['jobs_when_due']:,} |")
    print(f"| import → every run completed | {result['runs_done_seconds']:.1f} s |")
    print(f"| import → every email delivered (capture) | {result['delivered_seconds']:.1f} s |")
    print(f"\nLag from due (a delay's end; for the baseline, the first POST) to accepted and "
          f"to delivered, {runs:,} emails each:\n")  # fmt: skip
    print("| emails | to accepted p50 / p99 | to delivered p50 / p99 | delivered/s | "
          "CPU ms per email: worker / bench / database |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for name, lags in (("POST /emails/batch (baseline)", result["baseline"]),
                       ("automation send steps", result["lags"])):  # fmt: skip
        spent = lags["cpu_ms"]
        print(f"| {name} | {lags['accepted_p50']:.1f} / {lags['accepted_p99']:.1f} s | "
              f"{lags['delivered_p50']:.1f} / {lags['delivered_p99']:.1f} s | "
              f"{lags['per_second']:,.0f} | {spent['worker']:.2f} / {spent['bench']:.2f} / "
              f"{spent['database']:.2f} |")  # fmt: skip
    ratio = result["lags"]["per_second"] / result["baseline"]["per_second"]
    print(f"\nratio (send steps' emails delivered/s over the baseline's): {ratio:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.automations", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--runs", type=int, default=10_000, help="runs for the worker process (0: none)"
    )
    parser.add_argument("--delay", default="1m")
    parser.add_argument(
        "--statements", type=int, default=500, help="in-process send steps to count (0: none)"
    )
    parser.add_argument(
        "--batch",
        default="256",
        help="in process: jobs a claim takes (a comma list: each size in turn)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="in process: grouped and one-by-one send steps"
    )
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="posthaste-bench-") as workdir,
        prepared(args.backend, Path(workdir)) as backend,
    ):
        backend.data_dir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(measure(args, backend.server_database_url, backend.data_dir))
    report(args, result)


if __name__ == "__main__":
    main()
