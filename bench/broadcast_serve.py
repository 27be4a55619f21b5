"""``python -m bench.broadcast_serve``: a broadcast to a large segment expanded and delivered by
``posthaste serve`` while other clients' ``POST /emails`` are paced, beside the same load before
it, in the same run.

``posthaste serve`` as a user starts it (``bench/serve.py``: defaults, only ports, database,
delivery to a counting sink and DNS set); the bench adds and verifies ``acme.test`` through the
API, creates a segment, and writes ``--members`` contacts into it straight into the database
(not measured). Then ``POST /emails`` at ``--rate`` per second (open loop, latency from the
scheduled send time) for ``--warmup`` plus ``--before`` seconds, then ``POST /broadcasts`` with
``send: true`` to the segment (subject and html with contact fields and the unsubscribe link),
the paced load going on until the sink has every member's message, then for ``--after``
seconds more.

Reported: recipients per second accepted into the queue (from the send request until the
broadcast reads ``sent``) and delivered (until the sink has them all); the tree's RSS at rest
before and its peak during; and p50/p99/max of the paced requests scheduled before the
broadcast, while it was expanded, while it was being delivered, and after it, with a bare
commit's (``bench/commit_probe.py``), the server's own clock (``bench/server_latency.py``) and
the WAL the cluster wrote (``bench/wal.py``) in the same phases. Writes
``bench/results/broadcast-serve-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from bench import commit_probe, load, payload, server_latency, sink, wal
from bench.purge import run_each, sqlalchemy_url
from bench.serve import Run, Serve, _api, serving, set_up, watched
from bench.stats import Recorder, latency_figures
from posthaste.core.ids import new_id, now_ms
from posthaste.storage.tables import contacts, segment_members, teams

SEED_ROWS = 5000
HTML = (
    "<p>Hello {{contact.first_name}},</p><p>Your plan: {{contact.properties.plan}}.</p>"
    "<p>News of the week, in a few paragraphs of text. </p>"
    * 4
    + "<p><a href='{{unsubscribe_url}}'>Unsubscribe</a></p>"
)


async def seed(url: str, segment_id: str, members: int) -> float:
    """``members`` contacts of the server's team in the segment; seconds taken."""
    started_at = time.perf_counter()
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            team_id = (await conn.execute(select(teams.c.id).limit(1))).scalar_one()
        now = now_ms()
        for start in range(0, members, SEED_ROWS):
            ids = [new_id() for _ in range(min(SEED_ROWS, members - start))]
            rows = [
                {
                    "id": contact_id, "team_id": team_id,
                    "email": f"reader{start + n}@example.com",
                    "email_key": f"reader{start + n}@example.com",
                    "first_name": f"Reader{n}", "last_name": None, "unsubscribed": False,
                    "properties": {"plan": "pro"}, "created_at": now, "updated_at": now,
                }
                for n, contact_id in enumerate(ids)
            ]  # fmt: skip
            memberships = [
                {"segment_id": segment_id, "contact_id": c, "team_id": team_id, "created_at": now}
                for c in ids
            ]
            async with engine.begin() as conn:
                await conn.execute(insert(contacts), rows)
                await conn.execute(insert(segment_members), memberships)
        if engine.dialect.name == "postgresql":
            async with engine.begin() as conn:
                await conn.execute(text("ANALYZE"))
    finally:
        await engine.dispose()
    return time.perf_counter() - started_at


async def sent_at(run: Run, broadcast_id: str) -> tuple[float, dict[str, Any]]:
    """Poll the broadcast until it is no longer sending; when that was seen, and the record."""
    while True:
        record = await _api(run, "GET", f"/broadcasts/{broadcast_id}")
        if record["status"] not in ("scheduled", "sending"):
            return time.perf_counter(), record
        await asyncio.sleep(0.2)


def phases(recorder: Recorder, marks: list[tuple[str, float, float]]) -> dict[str, Any]:
    """The paced requests' latencies by when they were scheduled."""
    timed = list(zip(recorder.starts, recorder.latencies, strict=True))
    return {
        label: latency_figures([latency for at, latency in timed if began <= at < ended])
        for label, began, ended in marks
    }


async def measure(
    serve: Serve, sink_port: int, sink_pid: int, zone: Any, args: argparse.Namespace, data: Path
) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = Run(serve, sink_port, sink_pid, zone, http)
        await set_up(run)
        segment = await _api(run, "POST", "/segments", {"name": "Everyone"})
        seeded = await seed(sqlalchemy_url(serve, data), segment["id"], args.members)
        accepted = 0

        def counting(status: int, body: bytes) -> int:
            nonlocal accepted
            taken = load.count_single(status, body)
            accepted += taken
            return taken

        target = load.Target(
            [serve.url + "/emails"], serve.live_key, payload.single_bodies(), counting
        )
        rest_mib = run.memory().rss_mib
        scrape = functools.partial(server_latency.scrape, serve.url, "/emails")
        scrapes: list[Any] = []
        logs: list[dict[str, int]] = []  # the cluster's WAL at each mark (``bench/wal.py``)

        async def at_mark() -> None:
            scrapes.append(await scrape())
            logs.append(await wal.snapshot(serve.probe_dsn))

        stop = asyncio.Event()
        async with watched(run) as usage:
            start = time.perf_counter() + args.warmup
            paced = asyncio.create_task(
                load.open_loop(target, args.rate, (start, math.inf), stop=stop)
            )
            probe = commit_probe.beside(serve.probe_dsn)
            await asyncio.sleep(args.warmup)
            await at_mark()
            await asyncio.sleep(args.before)
            await at_mark()
            began = time.perf_counter()
            created = await _api(
                run, "POST", "/broadcasts",
                {
                    "segment_id": segment["id"], "from": "News <news@acme.test>", "send": True,
                    "subject": "Hello {{contact.first_name}}", "html": HTML,
                },
            )  # fmt: skip
            expanded, record = await sent_at(run, created["id"])
            await at_mark()
            delivered = await sink.until_counted(
                sink_port, run.expected + record["sent"] + accepted, run.log_tail
            )
            await at_mark()
            await asyncio.sleep(args.after)
            stop.set()
            outcome = await paced
            await at_mark()
            bare = await probe.samples() if probe is not None else []
        run.expected += record["sent"] + accepted
        await run.drained()
    marks = [
        ("before", start, began),
        ("expanding", began, expanded),
        ("delivering", expanded, delivered),
        ("after", delivered, delivered + args.after),
    ]
    return {
        "members": args.members,
        "seed_seconds": round(seeded, 1),
        "status": record["status"],
        "sent": record["sent"],
        "expansion_seconds": round(expanded - began, 2),
        "accepted_per_second": round(record["sent"] / (expanded - began)),
        "delivery_seconds": round(delivered - began, 2),
        "delivered_per_second": round(record["sent"] / (delivered - began)),
        "rss_rest_mib": round(rest_mib, 1),
        "rss_peak_mib": usage.peak_rss_mib,
        "rss_growth_mib": round(usage.peak_rss_mib - rest_mib, 1),
        "rate": args.rate,
        "paced": phases(outcome.recorder, marks),
        # The box's own commit latency by the same phases (``bench/commit_probe.py``).
        "bare_commit": {
            label: commit_probe.summary([latency for at, latency in bare if began <= at < ended])
            for label, began, ended in marks
        },
        # The server's own clock (``bench/server_latency.py``), by the same phases (each
        # window's scrapes are taken at its marks, so a request in flight may fall next door).
        "server": {
            label: server_latency.summary(first, last)
            for (label, _, _), first, last in zip(marks, scrapes[:-1], scrapes[1:], strict=True)
        },
        # What the cluster wrote in each phase: WAL, full-page images, checkpoints.
        "wal": {
            label: {**wal.between(first, last), "seconds": round(ended - began, 2)}
            for (label, began, ended), first, last in zip(marks, logs[:-1], logs[1:], strict=True)
        },
        "paced_failed": sum(outcome.recorder.errors.values()),
        **usage.as_dict(),
    }


def run_backend(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with serving(name, workdir / name) as (a, serve):
        return uvloop.run(measure(serve, a.sink_port, a.sink_pid, a.zone, args, a.backend.data_dir))


def table(name: str, result: dict[str, Any]) -> str:
    lines = [
        f"### {name}: a broadcast to {result['members']:,} members, {result['status']}",
        "",
        f"Accepted into the queue at {result['accepted_per_second']:,} recipients/s"
        f" ({result['expansion_seconds']} s), delivered at {result['delivered_per_second']:,}/s"
        f" ({result['delivery_seconds']} s); tree RSS {result['rss_rest_mib']} MiB at rest,"
        f" {result['rss_peak_mib']} MiB at peak (+{result['rss_growth_mib']});"
        f" paced failures: {result['paced_failed']}.",
        "",
        f"| `POST /emails` at {result['rate']:g}/s | requests | p50 | p99 | max"
        " | a bare commit beside it: p99 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    bare = result.get("bare_commit", {})
    for label, f in result["paced"].items():
        lines.append(
            f"| {label} | {f['requests']:,} | {f['p50_ms']} ms | {f['p99_ms']} ms"
            f" | {f['max_ms']} ms | {commit_probe.p99(bare.get(label))} |"
        )
    lines.append("")
    for label, f in result["server"].items():
        lines.append(
            f"The server's own clock, {label}: {f['p99_within_ms']} ms holds 99 %"
            f" ({f['requests']:,} requests; within 20 ms: {f['within_ms'].get('20')},"
            f" within 50 ms: {f['within_ms'].get('50')})."
        )
    lines.append("")
    for label, figures in result.get("wal", {}).items():
        lines.append(f"{label}: {wal.line(figures, figures['seconds'])}.")
    lines += ["", f"CPU: {result['cpu_pct']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broadcast_serve", description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="postgres")
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=100.0, help="paced POST /emails per second")
    parser.add_argument("--warmup", type=float, default=3.0, help="first seconds left out")
    parser.add_argument("--before", type=float, default=10.0, help="paced seconds before")
    parser.add_argument("--after", type=float, default=5.0, help="paced seconds after")
    return run_each(parser.parse_args(argv), "broadcast-serve", run_backend, table)


if __name__ == "__main__":
    raise SystemExit(main())
