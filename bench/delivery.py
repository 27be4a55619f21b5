"""``python -m bench.delivery``: accept → sent through ``smtp://``, DKIM-signed, on PostgreSQL.

Three processes share the machine's cores, as in production on one box:

- a sink: aiosmtpd on loopback that answers 250 at once (``bench/sink.py``);
- the worker(s): the real ``Worker`` and ``DeliveryService`` built by ``build_services``, with a
  DKIM key for the sender's domain (``python -m bench.delivery worker``; ``posthaste serve``
  cannot be given a key until the domains feature lands);
- this process: accepts the emails through ``SendingService.accept_batch`` (the one send path,
  batches of 100, live key) while the workers deliver, and counts ``sent`` emails.

Baselines, in the same run and against the same sink:

- a plain aiosmtplib client loop sending an already-built, already-signed message over 8
  connections (what any SMTP client reaches here with no database, no MIME, no signing);
- where Postfix is installed (``bench/postfix.py``), the figure the issue quotes: a Postfix of
  the run's own, relaying to the sink (``relayhost``), loaded with ``--emails`` unsigned
  messages of the same size over 16 connections; from the first submission until the sink has
  them all (the sink's ``XCOUNT`` command tells how many it took).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiosmtplib
import uvloop
from sqlalchemy import func, select
from tests.dkim_keys import StaticSigningKeys, make_key
from tests.senders import AnySender

from bench import cpu, payload, postfix, sink
from bench.server import SECRET_KEY, Backend, free_port, prepared, pythonpath
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.dkim import sign_message
from posthaste.core.ids import now_ms
from posthaste.core.models import KeyMode, Origin
from posthaste.core.send_request import parse_send_request
from posthaste.storage.tables import emails

KEY = make_key("acme.test")
BATCH = 100


# --- the worker -----------------------------------------------------------------------------


def bench_settings(database_url: str, data_dir: Path, sink_port: int) -> Settings:
    return Settings(
        database_url=database_url,
        data_dir=data_dir,
        secret_key=SECRET_KEY,
        delivery=DeliveryTarget(kind="smtp", host="127.0.0.1", port=sink_port, tls="none"),
        log_level="warning",
    )


def build(settings: Settings) -> Services:
    return build_services(
        settings,
        senders=AnySender(settings.default_region),
        signing_keys=StaticSigningKeys(KEY),
    )


async def run_worker(database_url: str, data_dir: Path, sink_port: int, batch: int) -> None:
    services = build(bench_settings(database_url, data_dir, sink_port))
    worker = services.make_worker(batch_size=batch)
    await services.db.start_listening()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    try:
        await worker.run()
    finally:
        await services.close()


# --- the measurement ------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    return subprocess.Popen([sys.executable, "-m", "bench.delivery", *args], env=env)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()


async def baseline(port: int, count: int, connections: int) -> float:
    """Messages/s of a bare aiosmtplib loop: one signed 5 KB message, reused connections."""
    raw = sign_message(_sample_message(), KEY, int(time.time()))

    async def one_connection(share: int) -> None:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False)
        await client.connect()
        for index in range(share):
            await client.sendmail("bounces@send.acme.test", [f"c{index}@example.test"], raw)
        await client.quit()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection(count // connections) for _ in range(connections)))
    return (count // connections * connections) / (time.perf_counter() - started)


def _sample_message() -> bytes:
    html = payload.email(1)["html"].replace("><", ">\r\n<")
    headers = (
        f"From: {payload.SENDER}\r\nTo: customer1@example.test\r\nSubject: Your Acme receipt\r\n"
        "Date: Mon, 23 Nov 2026 12:00:00 +0000\r\nMessage-ID: <1@acme.test>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    )
    return (headers + html * 4 + "\r\n").encode()


async def pipeline(
    services: Services, count: int, acceptors: int, pids: dict[str, list[int]]
) -> dict[str, Any]:
    """Accept ``count`` emails while the workers deliver; seconds until the last is ``sent``,
    and the CPU milliseconds per email of each kind of process meanwhile."""
    team = await services.teams.create_team("bench", 0, 0)
    key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.LIVE))
    principal = await services.api_keys.authenticate(key.token)
    bodies = [payload.email(i) for i in range(BATCH)]
    before = cpu.snapshot(pids)
    backends_before = {pid: cpu.process_seconds(pid) for pid in cpu.postgres_pids()}
    started = time.perf_counter()

    async def acceptor(batches: int) -> None:
        for _ in range(batches):
            now = now_ms()  # parsed each time, as the batch endpoint does
            requests = [parse_send_request(body, now) for body in bodies]
            await services.sending.accept_batch(principal.sender, Origin.BATCH, requests)

    accepting = asyncio.gather(*(acceptor(count // BATCH // acceptors) for _ in range(acceptors)))
    total = count // BATCH // acceptors * acceptors * BATCH
    accepted_at = 0.0
    while True:
        await asyncio.sleep(0.25)
        if accepting.done() and not accepted_at:
            await accepting
            accepted_at = time.perf_counter() - started
        async with services.db.read() as tx:
            query = (  # by the team's status index: the poll costs next to nothing
                select(func.count())
                .select_from(emails)
                .where(emails.c.team_id == team.id, emails.c.status == "sent")
            )
            sent = int((await tx.conn.execute(query)).scalar() or 0)
        if sent >= total:
            break
    elapsed = time.perf_counter() - started
    after = cpu.snapshot(pids)
    own = await cpu.database_backends_seconds(services.db, backends_before)
    cpu_ms = {
        label: 1000 * (after.processes[label] - before.processes[label]) / total
        for label in (*pids, "postgres")
    } | {"bench database backends": 1000 * own / total}
    return {"emails": total, "seconds": elapsed, "accept_seconds": accepted_at, "cpu_ms": cpu_ms}


async def measure(args: argparse.Namespace, backend: Backend) -> None:
    port = free_port()
    with sink.running(port) as sink_pid:
        base = await baseline(port, args.baseline_messages, args.connections)
        relayed = None
        if args.postfix and postfix.available():
            raw = _sample_message()
            relayed = await postfix.relay_to_sink(port, sink_pid, args.emails, 16, lambda _: raw)
        url = backend.server_database_url
        settings = bench_settings(url, backend.data_dir, port)
        await migrate(settings)
        services = build(settings)
        workers = [
            _spawn("worker", url, str(backend.data_dir), str(port), str(args.batch))
            for _ in range(args.workers)
        ]
        try:
            pids = {
                "workers": [worker.pid for worker in workers],
                "sink": [sink_pid],
                "acceptor": [os.getpid()],
            }
            result = await pipeline(services, args.emails, args.acceptors, pids)
        finally:
            for worker in workers:
                _stop(worker)
            await services.close()
    report(args, result, base, relayed)


def report(
    args: argparse.Namespace,
    result: dict[str, Any],
    base: float,
    relayed: dict[str, float] | None,
) -> None:
    rate = result["emails"] / result["seconds"]
    accept_rate = result["emails"] / result["accept_seconds"]
    print(f"\n{result['emails']:,} emails, {args.workers} worker process(es), PostgreSQL\n")
    print("| measurement | emails/s |")
    print("|---|---:|")
    print(f"| accept → sent (DKIM-signed, smtp:// to the sink) | {rate:,.0f} |")
    print(f"| acceptance alone, while delivering (accept_batch of {BATCH}) | {accept_rate:,.0f} |")
    print(f"| baseline: bare aiosmtplib loop to the same sink | {base:,.0f} |")
    if relayed is None:
        print("| baseline: Postfix relaying unsigned mail to the same sink | not measured |")
    else:
        print(
            "| baseline: Postfix relaying unsigned mail to the same sink | "
            f"{relayed['per_s']:,.0f} (accepting {relayed['accept_per_s']:,.0f}) |"
        )
    shares = " / ".join(f"{label} {ms:.2f}" for label, ms in result["cpu_ms"].items())
    print(f"\nCPU ms per email during the pipeline: {shares}")
    print("(postgres: every postgres process on the box, other databases included)")
    if relayed is not None:
        print(
            f"Postfix baseline, CPU ms per email: postfix {relayed['postfix_cpu_ms']:.2f} / "
            f"sink {relayed['sink_cpu_ms']:.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.delivery", description=__doc__)
    sub = parser.add_subparsers(dest="role")
    worker = sub.add_parser("worker")
    worker.add_argument("database_url")
    worker.add_argument("data_dir", type=Path)
    worker.add_argument("sink_port", type=int)
    worker.add_argument("batch", type=int)
    parser.add_argument("--emails", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--batch", type=int, default=64, help="jobs claimed at once per worker")
    parser.add_argument("--acceptors", type=int, default=2, help="concurrent accept_batch loops")
    parser.add_argument("--connections", type=int, default=8, help="baseline SMTP connections")
    parser.add_argument("--baseline-messages", type=int, default=8_000)
    parser.add_argument(
        "--no-postfix", dest="postfix", action="store_false", help="skip the Postfix baseline"
    )
    args = parser.parse_args(argv)
    run = uvloop.run  # every process on uvloop, as ``posthaste serve`` runs
    if args.role == "worker":
        run(run_worker(args.database_url, args.data_dir, args.sink_port, args.batch))
    else:
        with (
            tempfile.TemporaryDirectory(prefix="posthaste-bench-") as workdir,
            prepared("postgres", Path(workdir)) as backend,
        ):
            run(measure(args, backend))


if __name__ == "__main__":
    main()
