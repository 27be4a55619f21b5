"""``python -m bench.automations``: many contacts created in one import, each starting a run of
``contact.created → delay → send_email``, on SQLite or PostgreSQL.

- The import: one transaction inserts the contacts and calls ``start_for_contacts`` (what the
  contact import calls), which stores every run, its first step, its ``automation.run.started``
  event and its job in a few statements.
- While the runs wait: a real ``posthaste serve --role worker`` process; its resident memory and
  the queue's jobs show that no process holds a timer per run (the delay is each job's due time).
- Once the delays fall due together: how fast the runs' send steps complete (runs per
  second, from the first delay falling due to the last send step), each send step's lag (from
  its delay's end to the step executing) and how fast their emails are delivered (capture).
- In process, afterwards: what one send step asks of the database. ``--statements`` runs of
  ``contact.created → send_email`` are executed by a worker loop in this process (one claimed
  batch at a time) while SQLAlchemy's events count every statement and commit; with
  ``--compare``, once with the batch's send steps accepted together and once one by one, in
  alternating order, with the same number of runs.
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

from sqlalchemy import event, func, select
from sqlalchemy.orm import aliased

from bench import cpu
from bench.server import SECRET_KEY, prepared, pythonpath
from bench.stats import percentile
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.automations import parse_new_automation
from posthaste.core.contacts import Contact
from posthaste.core.durations import parse_duration
from posthaste.core.ids import new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import KeyMode
from posthaste.services.automation_runs import start_for_contacts
from posthaste.storage import bulk
from posthaste.storage.tables import automation_run_steps, automation_runs, contacts, emails, jobs
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


async def step_lags(services: Services, delay_ms: int) -> tuple[list[float], int, int]:
    """Each run's send step lag in seconds (from its delay's end to the step executing),
    sorted; and when the first delay ended and the last send step completed (epoch ms)."""
    pause, mail = aliased(automation_run_steps), aliased(automation_run_steps)
    query = select(pause.c.started_at, mail.c.started_at, mail.c.completed_at).join(
        mail, (mail.c.run_id == pause.c.run_id) & (mail.c.key == "mail")
    )
    async with services.db.read() as tx:
        rows = (await tx.conn.execute(query.where(pause.c.key == "pause"))).all()
    due = [paused + delay_ms for paused, _, _ in rows]
    lags = sorted((sent - at) / 1000 for at, (_, sent, _) in zip(due, rows, strict=True))
    return lags, min(due), max(done for _, _, done in rows)


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
            result["in_process"] = await in_process(services, args.statements, args.compare)
        return result
    finally:
        await services.close()


async def _with_worker(
    args: argparse.Namespace, settings: Settings, services: Services, data_dir: Path
) -> dict[str, Any]:
    """The ``--runs`` runs, executed by a real worker process."""
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
        team = await services.teams.create_team(f"bench-{new_id()[-12:]}", 0, 0)
        key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.TEST))
        principal = await services.api_keys.authenticate(key.token)
        await services.automations.create(principal, parse_new_automation(graph(args.delay)))
        await asyncio.sleep(3)  # the worker is up and idle
        idle = cpu.memory(cpu.tree_pids(worker.pid)).rss
        import_seconds = await imported(services, team.id, args.runs)
        started = time.monotonic()
        waiting_rss = 0

        def sampled() -> None:
            nonlocal waiting_rss
            waiting_rss = max(waiting_rss, cpu.memory(cpu.tree_pids(worker.pid)).rss)

        await reached(services, select(func.count()).select_from(emails), 1, sampled)
        queued = await scalar(services, select(func.count()).select_from(jobs))
        done = select(func.count()).where(automation_runs.c.status == "completed")
        await reached(services, done, args.runs)
        runs_done = time.monotonic() - started
        delivered = select(func.count()).where(emails.c.status == "delivered")
        await reached(services, delivered, args.runs)
        all_delivered = time.monotonic() - started
        first = await scalar(services, select(func.min(emails.c.created_at)))
        last = await scalar(services, select(func.max(emails.c.created_at)))
        lags, first_due, last_sent = await step_lags(
            services, int(parse_duration(args.delay) * 1000)
        )
        return {
            "runs": args.runs,
            "import_seconds": import_seconds,
            "idle_rss_mib": idle / 2**20,
            "waiting_rss_mib": waiting_rss / 2**20,
            "jobs_when_due": queued,
            "accept_seconds": (last - first) / 1000,
            "due_to_done_seconds": max(last_sent - first_due, 1) / 1000,
            "lag_p50": percentile(lags, 0.5),
            "lag_p99": percentile(lags, 0.99),
            "lag_max": lags[-1],
            "runs_done_seconds": runs_done,
            "delivered_seconds": all_delivered,
        }
    finally:
        worker.terminate()
        worker.wait(30)


async def in_process(services: Services, runs: int, compare: bool) -> list[dict[str, Any]]:
    """``runs`` send steps executed in this process, their statements counted; with
    ``compare``, grouped and one by one, alternating (``together`` first, then one by one,
    then each again, so that a box getting busier or quieter weighs on both)."""
    modes = [True, False, True, False] if compare else [True]
    results = [await _counted_steps(services, runs, together) for together in modes]
    return results


async def _counted_steps(services: Services, runs: int, together: bool) -> dict[str, Any]:
    team = await services.teams.create_team(f"bench-{new_id()[-12:]}", 0, 0)
    key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.TEST))
    principal = await services.api_keys.authenticate(key.token)
    await services.automations.create(principal, parse_new_automation(graph(None)))
    await imported(services, team.id, runs)
    services.automation_steps.together = together
    worker = Worker(
        services.db,
        {},
        lease_seconds=300,
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
    started = time.perf_counter()
    try:
        executed = await worker.run_until_idle()
    finally:
        took = time.perf_counter() - started
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", commit)
        services.automation_steps.together = True
    assert executed == runs, (executed, runs)
    return {"together": together, "runs": runs, "seconds": took, **counts}


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if result["runs"]:
        _report_worker(args, result)
    measured = result.get("in_process", [])
    if measured:
        print(f"\nIn process ({args.backend}), one claimed batch (32 jobs) at a time, "
              "contact.created → send_email:\n")  # fmt: skip
        print("| send steps | statements per step | commits per step | steps/s |")
        print("|---|---:|---:|---:|")
    for item in measured:
        how = "together" if item["together"] else "one by one"
        count = item["runs"]
        print(f"| {count:,} {how} | {item['statements'] / count:.1f} | "
              f"{item['commits'] / count:.2f} | {count / item['seconds']:,.0f} |")  # fmt: skip


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
    accept = runs / max(result["accept_seconds"], 1e-3)
    print(f"| emails accepted by send steps, first to last | {result['accept_seconds']:.1f} s "
          f"({accept:,.0f}/s) |")  # fmt: skip
    due = result["due_to_done_seconds"]
    print(f"| first delay due → last send step done | {due:.1f} s ({runs / due:,.0f} runs/s) |")
    print(f"| send step lag after its delay, p50 / p99 / max | {result['lag_p50']:.1f} / "
          f"{result['lag_p99']:.1f} / {result['lag_max']:.1f} s |")  # fmt: skip
    print(f"| import → every run completed | {result['runs_done_seconds']:.1f} s |")
    print(f"| import → every email delivered (capture) | {result['delivered_seconds']:.1f} s |")


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
