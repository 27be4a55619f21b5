"""``python -m bench.purge``: the paced ``POST /emails`` while the retention purge removes a
million rows, beside the same load once the purge is over, in the same run.

``posthaste serve`` as a user starts it (``bench/serve.py``: defaults, only ports, database,
delivery to a counting sink and DNS set) is started once to make its database, team and domain,
and stopped. Then ``--emails`` (125,000) delivered emails from 40 days ago are written straight
into its database, each with what the purge removes or empties: its html and text bodies, a
raw message blob, three events, a delivery attempt with its transcript, and a webhook delivery
with one attempt (a disabled endpoint): 8 rows an email, 1,000,000 in all by default; on
PostgreSQL a ``CHECKPOINT`` follows, as old data in a real deployment was checkpointed long
since (the purge's first change to each page is then a full-page image in the WAL). The purge
job is made due (as it would be an hour after its last run) and ``serve`` starts again.

From the moment it answers, ``POST /emails`` at ``--rate`` per second (open loop, latency from
the scheduled send time) until the server logs the purge's end, then for as long again.
Reported: the purge's duration and rows removed, and p50/p99/max of the requests scheduled
while it ran against those scheduled after it (the first ``--warmup`` seconds left out), a
bare commit's beside them (``bench/commit_probe.py``), the WAL the cluster wrote in each window
(``bench/wal.py``), plus CPU of the tree and the database. Writes
``bench/results/purge-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import create_async_engine

from bench import commit_probe, load, payload, server_latency, wal
from bench.serve import RESULTS, Run, Serve, set_up, started, surroundings, watched
from bench.stats import Recorder, latency_figures
from posthaste.core.ids import now_ms
from posthaste.storage.tables import (
    blobs,
    delivery_attempts,
    emails,
    events,
    jobs,
    teams,
    webhook_attempts,
    webhook_deliveries,
    webhooks,
)

DAY_MS = 86_400_000
AGE_DAYS = 40  # older than the default retention (30 days)
ROWS_PER_EMAIL = 8  # the email's content, its blob, 3 events, an attempt, a delivery, its attempt
CHUNK = 2_000  # emails per seeding transaction
BODY = "<p>" + "Your order has shipped. " * 40 + "</p>"
PURGE_DONE = "retention purge (sent)"


def old_id(ms: int) -> str:
    """A UUIDv7 minted at ``ms`` (the purge compares ids, which sort by time)."""
    stamp = f"{ms:012x}"
    tail = random.getrandbits(74)
    return (
        f"{stamp[:8]}-{stamp[8:]}-7{tail >> 62 & 0xFFF:03x}-"
        f"{0x8000 | (tail >> 48 & 0x3FFF):04x}-{tail & 0xFFFFFFFFFFFF:012x}"
    )


def sqlalchemy_url(serve: Serve, data_dir: Path) -> str:
    if serve.database_url:
        return serve.database_url.replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"sqlite+aiosqlite:///{data_dir / 'posthaste.db'}"


def _email_rows(team_id: str, webhook_id: str, at: int) -> dict[str, list[dict[str, Any]]]:
    email_id, blob_id, ids = old_id(at), old_id(at), [old_id(at + n) for n in range(1, 6)]
    address = f"user{random.getrandbits(40)}@example.test"
    return {
        "blobs": [{"id": blob_id, "team_id": team_id, "data": BODY.encode(), "created_at": at}],
        "emails": [
            {
                "id": email_id,
                "team_id": team_id,
                "mode": "live",
                "from_address": "shop@acme.test",
                "from_lookup": "shop@acme.test",
                "to": [address],
                "cc": [],
                "bcc": [],
                "reply_to": [],
                "subject": "Your order has shipped",
                "html": BODY,
                "text": BODY,
                "headers": {},
                "tags": [],
                "status": "delivered",
                "last_event": "email.delivered",
                "created_at": at,
                "sent_at": at + 1,
                "stream_id": "outbound",
                "message_id": f"<{email_id}@acme.test>",
                "region": "local",
                "raw_blob_id": blob_id,
                "attempts": 1,
                "origin": "api",
            }
        ],
        "events": [
            {
                "id": event_id,
                "team_id": team_id,
                "type": kind,
                "email_id": email_id,
                "created_at": at + n,
                "data": {"email_id": email_id, "to": [address]},
            }
            for n, (event_id, kind) in enumerate(
                zip(ids[:3], ("email.sent", "email.delivered", "email.opened"), strict=True)
            )
        ],
        "delivery_attempts": [
            {
                "id": ids[3],
                "team_id": team_id,
                "email_id": email_id,
                "attempt": 1,
                "attempted_at": at,
                "transport": "smtp",
                "host": "mx.example.test",
                "recipients": [address],
                "replies": [{"code": 250, "message": "2.0.0 OK"}],
                "transcript": ["connect mx.example.test", "250 2.0.0 OK"],
                "duration_ms": 40,
            }
        ],
        "webhook_deliveries": [
            {
                "webhook_id": webhook_id,
                "event_id": ids[1],
                "team_id": team_id,
                "status": "delivered",
                "attempts": 1,
                "claims": 1,
                "created_at": at,
            }
        ],
        "webhook_attempts": [
            {
                "id": ids[4],
                "webhook_id": webhook_id,
                "event_id": ids[1],
                "team_id": team_id,
                "attempted_at": at,
                "status_code": 200,
                "success": True,
                "duration_ms": 12,
            }
        ],
    }


TABLES = {
    table.name: table
    for table in (blobs, emails, events, delivery_attempts, webhook_deliveries, webhook_attempts)
}


async def seed(url: str, count: int) -> float:
    """``count`` old delivered emails and their records. Seconds taken."""
    started_at = time.perf_counter()
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            team_id = (await conn.execute(select(teams.c.id).limit(1))).scalar_one()
            webhook_id = old_id(now_ms())
            await conn.execute(
                insert(webhooks).values(
                    id=webhook_id,
                    team_id=team_id,
                    endpoint="https://hooks.example.test/",
                    events=["email.delivered"],
                    enabled=False,
                    secret="-",
                    created_at=now_ms(),
                    updated_at=now_ms(),
                )
            )
        first = now_ms() - AGE_DAYS * DAY_MS
        for start in range(0, count, CHUNK):
            rows: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
            for n in range(start, min(start + CHUNK, count)):
                for name, made in _email_rows(team_id, webhook_id, first + n * 10).items():
                    rows[name].extend(made)
            async with engine.begin() as conn:
                for name, table in TABLES.items():
                    await conn.execute(insert(table), rows[name])
        if engine.dialect.name == "postgresql":
            async with engine.begin() as conn:
                await conn.execute(text("ANALYZE"))
            # As in a real deployment, where mail of 40 days ago was checkpointed long since:
            # the purge's first change to each page is then logged whole (a full-page image),
            # which a checkpoint landing at random during the seeding made a matter of chance
            # (42,321 full-page images in one run, 15,751 in the next, of the same rows).
            async with engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text("CHECKPOINT"))
    finally:
        await engine.dispose()
    return time.perf_counter() - started_at


async def make_due(url: str) -> None:
    """The purge job due now, as it would be an hour after its last run (the workers see it at
    their next wake-up, which the paced load's commits bring within a fraction of a second)."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(update(jobs).where(jobs.c.kind == "purge").values(available_at=0))
    finally:
        await engine.dispose()


async def purge_end(log: Path) -> float:
    """The ``time.perf_counter()`` at which the server logged the end of the sent mail's purge
    (each start writes its log afresh)."""
    while True:
        with log.open("rb") as file:
            if PURGE_DONE.encode() in file.read():
                return time.perf_counter()
        await asyncio.sleep(0.2)


def split(
    recorder: Recorder, began: float, ended: float, args: argparse.Namespace
) -> dict[str, Any]:
    """The requests scheduled while the purge ran against those scheduled after it."""
    timed = list(zip(recorder.starts, recorder.latencies, strict=True))
    during = [latency for at, latency in timed if began <= at < ended]
    after = [latency for at, latency in timed if at >= ended + args.settle]
    failed = sum(recorder.errors.values())
    return {
        "during_purge": latency_figures(during),
        "after_purge": latency_figures(after),
        "failed": failed,
    }


async def measure(
    serve: Serve,
    sink_port: int,
    sink_pid: int,
    args: argparse.Namespace,
    data_dir: Path,
) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = Run(serve, sink_port, sink_pid, None, http)  # type: ignore[arg-type]
        target = load.Target(
            [serve.url + "/emails"], serve.live_key, payload.single_bodies(), load.count_single
        )
        stop = asyncio.Event()
        async with watched(run) as usage:
            window = (time.perf_counter(), math.inf)  # until ``stop``
            load_task = asyncio.create_task(load.open_loop(target, args.rate, window, stop=stop))
            probe = commit_probe.beside(serve.probe_dsn)
            await asyncio.sleep(args.warmup)
            at_start = await server_latency.scrape(serve.url, "/emails")
            wal_start = await wal.snapshot(serve.probe_dsn)
            began = time.perf_counter()
            await make_due(sqlalchemy_url(serve, data_dir))
            try:
                ended = await asyncio.wait_for(purge_end(serve.log), args.max_purge)
            except TimeoutError:
                stop.set()
                await load_task
                raise RuntimeError(f"no end of the purge logged:\n{run.log_tail()}") from None
            at_end = await server_latency.scrape(serve.url, "/emails")
            wal_end = await wal.snapshot(serve.probe_dsn)
            await asyncio.sleep(max(ended - began, args.min_after) + args.settle)
            stop.set()
            outcome = await load_task
            last = await server_latency.scrape(serve.url, "/emails")
            wal_last = await wal.snapshot(serve.probe_dsn)
            after_seconds = time.perf_counter() - ended
            bare = await probe.samples() if probe is not None else []
        run.expected += outcome.recorder.accepted
        await run.drained()
        return {
            "rate": args.rate,
            "purge_seconds": round(ended - began, 1),
            **split(outcome.recorder, began, ended, args),
            # The box's own commit latency, the same two windows (``bench/commit_probe.py``).
            "bare_commit": {
                "during_purge": commit_probe.summary(
                    [latency for at, latency in bare if began <= at < ended]
                ),
                "after_purge": commit_probe.summary(
                    [latency for at, latency in bare if at >= ended + args.settle]
                ),
            },
            # The server's own clock (``bench/server_latency.py``): its share within each bound.
            "server_during_purge": server_latency.summary(at_start, at_end),
            "server_after_purge": server_latency.summary(at_end, last),
            # What the cluster wrote in each window (``bench/wal.py``).
            "wal_during_purge": wal.between(wal_start, wal_end),
            "wal_after_purge": wal.between(wal_end, wal_last),
            "after_seconds": round(after_seconds, 1),
            "purge_log": _purge_lines(serve.log),
            **usage.as_dict(),
        }


def _purge_lines(log: Path) -> list[str]:
    with log.open("rb") as file:
        lines = file.read().decode(errors="replace").splitlines()
    return [line[-400:] for line in lines if "retention purge" in line]


async def prepare(serve: Serve, sink_port: int, sink_pid: int, zone: Any) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        await set_up(Run(serve, sink_port, sink_pid, zone, http))


def run_backend(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with surroundings(name, workdir / name) as around:
        backend, zone = around.backend, around.zone
        sink_port, sink_pid = around.sink_port, around.sink_pid
        print(f"[{name}] first start: database, team, domain ...", flush=True)
        with started(backend, sink_port, zone.port) as serve:
            uvloop.run(prepare(serve, sink_port, sink_pid, zone))
        url = sqlalchemy_url(serve, backend.data_dir)
        print(f"[{name}] seeding {args.emails:,} old emails ...", flush=True)
        seconds = asyncio.run(seed(url, args.emails))
        print(f"[{name}]   {seconds:.0f} s; starting again, paced at {args.rate:g}/s", flush=True)
        with started(backend, sink_port, zone.port) as serve:
            result = uvloop.run(measure(serve, sink_port, sink_pid, args, backend.data_dir))
        left = asyncio.run(_left(url))
    return {
        "emails": args.emails,
        "rows": args.emails * ROWS_PER_EMAIL,
        "seed_seconds": round(seconds, 1),
        "left_after": left,
        **result,
    }


async def _left(url: str) -> dict[str, int]:
    """What is still there below the cut-off after the run (the purge's proof)."""
    engine = create_async_engine(url)
    cutoff = old_id(now_ms() - 30 * DAY_MS)
    try:
        async with engine.connect() as conn:
            found = {}
            for name, table in TABLES.items():
                if name == "webhook_deliveries":
                    query = select(func.count()).select_from(table).where(table.c.event_id < cutoff)
                elif name == "emails":
                    query = (
                        select(func.count())
                        .select_from(table)
                        .where(table.c.id < cutoff, table.c.html.is_not(None))
                    )
                else:
                    query = select(func.count()).select_from(table).where(table.c.id < cutoff)
                found[name] = (await conn.execute(query)).scalar_one()
            return found
    finally:
        await engine.dispose()


def table(name: str, result: dict[str, Any]) -> str:
    during, after = result["during_purge"], result["after_purge"]
    bare = result.get("bare_commit", {})
    during_wal, after_wal = result.get("wal_during_purge", {}), result.get("wal_after_purge", {})
    return "\n".join(
        [
            f"### {name}: {result['rows']:,} rows purged"
            f" ({result['emails']:,} emails of {AGE_DAYS} days ago)",
            "",
            f"The purge took {result['purge_seconds']} s;"
            f" `POST /emails` paced at {result['rate']:g}/s; failed requests: {result['failed']};"
            f" left below the cut-off: {result['left_after']}.",
            "",
            "| `POST /emails` | requests | p50 | p99 | max | a bare commit beside it: p99 |",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {label} | {f['requests']:,} | {f['p50_ms']} ms | {f['p99_ms']} ms"
                f" | {f['max_ms']} ms | {commit_probe.p99(bare.get(key))} |"
                for label, key, f in (
                    ("while the purge runs", "during_purge", during),
                    ("after it", "after_purge", after),
                )
            ),
            "",
            *(
                f"The server's own clock, {label}: {f['p99_within_ms']} ms holds 99 %"
                f" ({f['requests']:,} requests; within 20 ms: {f['within_ms'].get('20')})."
                for label, f in (
                    ("while the purge runs", result["server_during_purge"]),
                    ("after it", result["server_after_purge"]),
                )
            ),
            "",
            f"While the purge runs: {wal.line(during_wal, result['purge_seconds'])}.",
            f"After it: {wal.line(after_wal, result.get('after_seconds', 0.0))}.",
            "",
            f"CPU: {result['cpu_pct']}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.purge", description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="postgres")
    parser.add_argument("--emails", type=int, default=125_000, help="old emails (8 rows each)")
    parser.add_argument("--rate", type=float, default=100.0, help="paced POST /emails per second")
    parser.add_argument("--warmup", type=float, default=3.0, help="first seconds left out")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds left out after the end")
    parser.add_argument("--min-after", type=float, default=20.0, help="least seconds after")
    parser.add_argument("--max-purge", type=float, default=1800.0, help="give up after (s)")
    return run_each(parser.parse_args(argv), "purge", run_backend, table)


def run_each(
    args: argparse.Namespace,
    name: str,
    run: Callable[[str, argparse.Namespace, Path], dict[str, Any]],
    table: Callable[[str, dict[str, Any]], str],
) -> int:
    """``run`` for each backend of ``args.backend``, its ``table`` printed; all the results
    written to ``bench/results/<name>-<time>.json``."""
    names = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix=f"posthaste-{name}-") as workdir:
        for backend in names:
            results[backend] = run(backend, args, Path(workdir))
            print(table(backend, results[backend]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
