"""``python -m bench.tracking``: the open and click tracking endpoints, beside a baseline.

For each backend: a real ``posthaste serve --role api`` on a fresh database, with
``POSTHASTE_SECRET_KEY`` and ``POSTHASTE_PUBLIC_URL`` set so that this process makes exactly the
tokens the server's own rewriting would (``core/tracking.py``); ``--emails`` emails accepted
through ``POST /emails/batch`` with a test key (nothing is delivered: the API role alone runs).
Then, for ``--warmup`` + ``--duration`` seconds each, ``--concurrency`` aiohttp clients in a
closed loop (each sends its next request when its last is answered), measured after the warm-up:

1. **baseline**: ``GET /healthz`` on the same server in the same run: routing, middleware and
   the HTTP stack, the floor under any endpoint;
2. **opens**: ``GET /t/o/{token}``, the pixels of ``--open-emails`` emails round robin: each
   email's first open in a minute is recorded, the rest are answered without a write (the
   per-visitor throttle), as a mail client reloading or a proxy re-fetching would be;
3. **clicks**: ``GET /t/c/{token}``, a link never fetched before on every request (an email's
   ``--links`` links, emails interleaved), so every hit within an email's burst is recorded:
   the write path at its busiest.

For each: requests/s, p50/p99/max latency, errors, the server's CPU (% of one core, and ms per
answered request), the load generator's CPU (this process: when it nears 100 %, the generator
is the bound, not the server), and the events the hits wrote (counted in the database once the
writes settle). Prints a markdown
table and writes ``bench/results/tracking-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bench import server
from bench.cpu import process_seconds
from bench.stats import Measurement, Recorder
from posthaste.core.tracking import TrackingLinks

RESULTS = Path(__file__).resolve().parent / "results"
PUBLIC_URL = "https://track.bench"
TIMEOUT = aiohttp.ClientTimeout(total=30)


@dataclass
class Figures:
    backend: str
    name: str
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    requests: int
    errors: dict[str, int]
    server_cpu_percent: float
    server_cpu_ms_per_request: float
    client_cpu_percent: float
    events_recorded: int | None


async def _accept_emails(url: str, key: str, count: int) -> list[str]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    email = {"from": "Acme <hello@acme.test>", "to": "ann@example.com", "subject": "Offer"}
    ids: list[str] = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        while len(ids) < count:
            batch = [{**email, "html": "<p>x</p>"}] * min(100, count - len(ids))
            async with http.post(
                f"{url}/emails/batch", data=orjson.dumps(batch), headers=headers
            ) as answer:
                assert answer.status == 200, await answer.text()
                ids += [item["id"] for item in orjson.loads(await answer.read())["data"]]
    return ids


async def _closed_loop(
    url: str, paths: Callable[[], str], concurrency: int, warmup: float, duration: float
) -> Recorder:
    recorder = Recorder()
    start = time.perf_counter()
    window_start, window_end = start + warmup, start + warmup + duration
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)

    async def client(http: aiohttp.ClientSession) -> None:
        while (begin := time.perf_counter()) < window_end:
            error = None
            try:
                async with http.get(url + paths(), allow_redirects=False) as answer:
                    await answer.read()
                    if answer.status not in (200, 302):
                        error = f"HTTP {answer.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = type(exc).__name__
            if begin >= window_start:
                recorder.add(begin, time.perf_counter(), 0 if error else 1, error)

    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return recorder


async def _events(database_url: str, kind: str) -> int:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            query = text("SELECT count(*) FROM events WHERE type = :kind")
            return int((await conn.execute(query, {"kind": kind})).scalar_one())
    finally:
        await engine.dispose()


async def _settled(database_url: str, kind: str, within: float = 30.0) -> int:
    """The count of ``kind`` events once it stops growing (the writes follow the answers)."""
    deadline = time.monotonic() + within
    last = -1
    while time.monotonic() < deadline:
        now = await _events(database_url, kind)
        if now == last:
            return now
        last = now
        await asyncio.sleep(1.0)
    return last


def _database_url(backend: server.Backend) -> str:
    if backend.server_database_url:
        return backend.server_database_url.replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"sqlite+aiosqlite:///{backend.data_dir / 'posthaste.db'}"


def _run_backend(name: str, args: argparse.Namespace, workdir: Path) -> list[Figures]:
    figures: list[Figures] = []
    with server.prepared(name, workdir) as backend:
        # Tokens are checked whatever host they were made for: only the path is requested.
        env = {"POSTHASTE_SECRET_KEY": server.SECRET_KEY, "POSTHASTE_PUBLIC_URL": PUBLIC_URL}
        with server.running(backend, extra_env=env) as running:
            url, pid = running.urls[0], running.pids[0]
            database = _database_url(backend)
            team, ids = asyncio.run(_prepare(url, running.key, args.emails, database))
            links = TrackingLinks(server.SECRET_KEY, PUBLIC_URL)
            opened = ids[: args.open_emails]
            opens = itertools.cycle([_path(links.open_url(team, e)) for e in opened])
            made = [
                _path(links.click_url(team, e, f"https://shop.example.com/p/{n}?e={e}"))
                for n in range(args.links)
                for e in ids
            ]
            clicks = itertools.cycle(made)
            scenarios: list[tuple[str, Callable[[], str], str | None]] = [
                ("baseline: GET /healthz", lambda: "/healthz", None),
                ("opens: GET /t/o/{token}", lambda: next(opens), "email.opened"),
                (
                    "clicks, a new link each: GET /t/c/{token}",
                    lambda: next(clicks),
                    "email.clicked",
                ),
            ]
            for label, paths, kind in scenarios:
                print(f"[{name}] {label} ...", flush=True)
                cpu_before, wall_before = process_seconds(pid), time.perf_counter()
                client_before = time.process_time()
                recorder = asyncio.run(
                    _closed_loop(url, paths, args.concurrency, args.warmup, args.duration)
                )
                wall = time.perf_counter() - wall_before
                cpu = (process_seconds(pid) - cpu_before) / wall
                client = (time.process_time() - client_before) / wall
                recorded = asyncio.run(_settled(database, kind)) if kind else None
                figures.append(_figures(name, label, recorder, (cpu, client), recorded, args))
    return figures


async def _prepare(url: str, key: str, count: int, database_url: str) -> tuple[str, list[str]]:
    ids = await _accept_emails(url, key, count)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        for path in ("/t/o/x.y", "/t/c/x.y"):  # FastAPI sets routes up on first use: not timed
            async with http.get(url + path) as answer:
                await answer.read()
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            query = text("SELECT team_id FROM emails WHERE id = :id")
            team = str((await conn.execute(query, {"id": ids[0]})).scalar_one())
    finally:
        await engine.dispose()
    return team, ids


def _path(url: str) -> str:
    return url.removeprefix(PUBLIC_URL)


def _figures(
    backend: str,
    name: str,
    recorder: Recorder,
    cpu: tuple[float, float],
    recorded: int | None,
    args: argparse.Namespace,
) -> Figures:
    """``cpu``: the server's and this process's, in cores over the phase (warm-up included)."""
    measured = Measurement.of(
        name, "http", recorder, concurrency=args.concurrency, emails_per_request=0
    )
    per_request = cpu[0] * 1000 / measured.requests_per_s if measured.requests_per_s else 0.0
    return Figures(
        backend,
        name,
        round(measured.requests_per_s),
        round(measured.p50_ms, 2),
        round(measured.p99_ms, 2),
        round(measured.max_ms, 2),
        measured.requests,
        measured.errors,
        round(cpu[0] * 100),
        round(per_request, 2),
        round(cpu[1] * 100),
        recorded,
    )


def table(figures: list[Figures]) -> str:
    rows = [
        "| backend | measurement | requests/s | p50 ms | p99 ms | max ms | server CPU % "
        "| server CPU ms/request | load generator CPU % | events written | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for f in figures:
        written = "" if f.events_recorded is None else str(f.events_recorded)
        errors = ", ".join(f"{k}: {v}" for k, v in f.errors.items()) or "none"
        rows.append(
            f"| {f.backend} | {f.name} | {f.requests_per_s:,} | {f.p50_ms} | {f.p99_ms} | "
            f"{f.max_ms} | {f.server_cpu_percent} | {f.server_cpu_ms_per_request} | "
            f"{f.client_cpu_percent} | {written} | {errors} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracking", description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--emails", type=int, default=2000)
    parser.add_argument("--links", type=int, default=25, help="distinct links per email")
    parser.add_argument("--open-emails", type=int, default=100, help="emails whose pixels are hit")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    figures: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-tracking-") as tmp:
        for name in backends:
            figures += _run_backend(name, args, Path(tmp) / name)
    print(table(figures))
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"tracking-{stamp}.json"
    out.write_text(
        json.dumps({"args": vars(args), "figures": [asdict(f) for f in figures]}, indent=2)
    )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
