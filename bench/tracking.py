"""``python -m bench.tracking``: the open and click tracking endpoints of ``posthaste serve`` as a
user starts it, beside ``/healthz`` and a bare uvicorn application in the same run.

For each backend: ``posthaste serve`` started as ``bench.serve`` starts it (its defaults, with
``POSTHASTE_PUBLIC_URL`` set, as tracking needs, and ``POSTHASTE_SECRET_KEY``, so that this
process makes exactly the tokens the server's rewriting would: ``core/tracking.py``); its
domain verified through the loopback DNS server, ``--emails`` emails sent with the live key and
delivered to the sink before anything is timed. The load generator is ``wrk`` (C, one thread,
``--connections`` connections in a closed loop, a Lua script walking a list of paths; Debian's
``apt-get install wrk``), so that the client takes little of the two cores. Each phase is
``--warmup`` seconds unmeasured, then ``--duration`` seconds measured:

1. ``GET /healthz`` on the same server: the API's middleware and FastAPI's routing, the floor
   under any route of the application;
2. **opens**, ``GET /t/o/{token}`` over the pixels of ``--open-emails`` emails round robin: each
   email's first open in a minute is recorded, the rest are answered without a write (the
   per-visitor throttle), as a mail client reloading or a proxy re-fetching would be;
3. **clicks**, ``GET /t/c/{token}``, a link never fetched before on every request (``--links``
   links of every email, emails interleaved), so every hit within an email's burst is recorded:
   the write path at its busiest;
4. a bare uvicorn application (a process of its own, uvloop and httptools as ``serve`` runs
   them, answering ``hello``): the HTTP server alone, the ceiling of any Python answer here.

For each: requests/s, p50/p99/max latency (wrk's), errors, the server's CPU (its whole process
tree: % of one core, and ms per answered request), wrk's CPU, the box's CPU and the load
average, and the events the hits wrote (counted in the database once the writes settle). Prints a
markdown table and writes ``bench/results/tracking-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bench import cpu, relay, serve, server
from posthaste.core.tracking import TrackingLinks

RESULTS = Path(__file__).resolve().parent / "results"
PUBLIC_URL = "https://track.bench"
TIMEOUT = aiohttp.ClientTimeout(total=60)
WARMUP_CLICKS = 0.2  # of the click links, for the warm-up (the rest are measured, new each)
WRK_SCRIPT = """\
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[((i - 1) % #paths) + 1])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\n{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "max_us": %d,'
    .. ' "status_errors": %d, "socket_errors": %d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.status, e.connect + e.read + e.write + e.timeout))
end
"""


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
    wrk_cpu_percent: float
    machine_cpu_percent: float
    load_average: float
    events_recorded: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# --- the load generator -------------------------------------------------------------------------


def wrk(url: str, paths: Path, args: argparse.Namespace, seconds: float) -> dict[str, Any]:
    """One ``wrk`` run over ``paths`` (one a line); its figures and its own CPU seconds."""
    script = paths.with_suffix(".lua")
    script.write_text(WRK_SCRIPT)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [
        "wrk",
        "-t1",
        f"-c{args.connections}",
        f"-d{seconds:g}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(
        command, env={**os.environ, "BENCH_PATHS": str(paths)}, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"wrk failed: {done.stderr}{done.stdout}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def measure(
    label: str,
    backend: str,
    url: str,
    paths: Path,
    server_tree: int,
    args: argparse.Namespace,
    warmup_paths: Path | None = None,
) -> Figures:
    print(f"[{backend}] {label} ...", flush=True)
    if args.warmup:
        wrk(url, warmup_paths or paths, args, args.warmup)
    before = cpu.snapshot({}, {"server": server_tree})
    found = wrk(url, paths, args, args.duration)
    after = cpu.snapshot({}, {"server": server_tree})
    wall = after.wall - before.wall
    shares = cpu.usage(before, after)
    seconds = found["duration_us"] / 1e6
    rate = found["requests"] / seconds
    server_seconds = after.processes["server"] - before.processes["server"]
    errors = {
        name: found[key]
        for name, key in (("HTTP >= 400", "status_errors"), ("socket", "socket_errors"))
        if found[key]
    }
    return Figures(
        backend,
        label,
        round(rate),
        round(found["p50_us"] / 1000, 2),
        round(found["p99_us"] / 1000, 2),
        round(found["max_us"] / 1000, 2),
        found["requests"],
        errors,
        round(100 * server_seconds / wall),
        round(1000 * server_seconds / found["requests"], 3),
        round(100 * found["cpu_seconds"] / wall),
        shares["machine_pct"],
        round(os.getloadavg()[0], 1),
    )


# --- the server and what it is asked ------------------------------------------------------------


async def _send_emails(run: serve.Run, count: int) -> list[str]:
    await serve.set_up(run)
    ids: list[str] = []
    email = {"from": f"Acme <hello@{serve.DOMAIN}>", "to": "ann@example.com", "subject": "Offer"}
    while len(ids) < count:
        batch = [{**email, "html": "<p>x</p>"}] * min(100, count - len(ids))
        async with run.http.post(
            run.serve.url + "/emails/batch", data=orjson.dumps(batch), headers=run.auth
        ) as answer:
            assert answer.status == 200, await answer.text()
            ids += [item["id"] for item in orjson.loads(await answer.read())["data"]]
    run.expected += len(ids)
    await run.drained()  # the workers are idle again before anything is timed
    for path in ("/t/o/x.y", "/t/c/x.y"):  # the routes' first use, untimed
        async with run.http.get(run.serve.url + path) as answer:
            await answer.read()
    return ids


async def _prepared(
    started: serve.Serve, sink_port: int, sink_pid: int, zone: Any, count: int
) -> list[str]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        run = serve.Run(started, sink_port, sink_pid, zone, http)
        return await _send_emails(run, count)


async def _events(database_url: str, kind: str) -> int:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            query = text("SELECT count(*) FROM events WHERE type = :kind")
            return int((await conn.execute(query, {"kind": kind})).scalar_one())
    finally:
        await engine.dispose()


async def _team(database_url: str, email_id: str) -> str:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            query = text("SELECT team_id FROM emails WHERE id = :id")
            return str((await conn.execute(query, {"id": email_id})).scalar_one())
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


def _write_paths(folder: Path, name: str, paths: list[str]) -> Path:
    path = folder / f"{name}.paths"
    path.write_text("\n".join(paths) + "\n")
    return path


def _run_backend(name: str, args: argparse.Namespace, workdir: Path) -> list[Figures]:
    env = {"POSTHASTE_SECRET_KEY": server.SECRET_KEY, "POSTHASTE_PUBLIC_URL": PUBLIC_URL}
    print(f"[{name}] starting posthaste serve ...", flush=True)
    with serve.serving(name, workdir, env) as (around, started):
        ids = uvloop.run(
            _prepared(started, around.sink_port, around.sink_pid, around.zone, args.emails)
        )
        database = _database_url(around.backend)
        team = asyncio.run(_team(database, ids[0]))
        links = TrackingLinks(server.SECRET_KEY, PUBLIC_URL)
        opens = [_path(links.open_url(team, e)) for e in ids[: args.open_emails]]
        clicks = [
            _path(links.click_url(team, e, f"https://shop.example.com/p/{n}?e={e}"))
            for n in range(args.links)
            for e in ids
        ]
        split = int(len(clicks) * WARMUP_CLICKS)
        folder = around.backend.workdir
        healthz = _write_paths(folder, "healthz", ["/healthz"])
        opened = _write_paths(folder, "opens", opens)
        clicked = _write_paths(folder, "clicks", clicks[split:])
        clicked_warm = _write_paths(folder, "clicks-warm", clicks[:split])
        url, pid = started.url, started.pid
        figures = [measure("baseline: GET /healthz", name, url, healthz, pid, args)]
        figures.append(measure("opens: GET /t/o/{token}", name, url, opened, pid, args))
        figures[-1].events_recorded = asyncio.run(_settled(database, "email.opened"))
        label = "clicks, a new link each: GET /t/c/{token}"
        figures.append(measure(label, name, url, clicked, pid, args, clicked_warm))
        figures[-1].events_recorded = asyncio.run(_settled(database, "email.clicked"))
        figures.append(_bare(name, folder, args))
    return figures


def _bare(name: str, folder: Path, args: argparse.Namespace) -> Figures:
    """A bare uvicorn application in a process of its own: ``hello`` to every request."""
    port = server.free_port()
    command = [sys.executable, "-m", "bench.tracking", "--hello", str(port)]
    env = {**os.environ, "PYTHONPATH": server.pythonpath()}
    log = folder / "hello.log"
    with relay._process(command, env, folder, port, log, shared=True) as pid:
        paths = _write_paths(folder, "hello", ["/"])
        label = "bare uvicorn: an ASGI hello (uvloop, httptools)"
        return measure(label, name, f"http://127.0.0.1:{port}", paths, pid, args)


def _path(url: str) -> str:
    return url.removeprefix(PUBLIC_URL)


async def _hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")],
        }
    )
    await send({"type": "http.response.body", "body": b"hello"})


def serve_hello(port: int) -> None:
    import uvicorn

    config = uvicorn.Config(
        _hello,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
    )
    uvicorn.Server(config).run()


# --- the report ---------------------------------------------------------------------------------


def table(figures: list[Figures]) -> str:
    rows = [
        "| backend | measurement | requests/s | p50 ms | p99 ms | max ms | server CPU % "
        "| server CPU ms/request | wrk CPU % | box CPU % | load avg | events written | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for f in figures:
        written = "" if f.events_recorded is None else f"{f.events_recorded:,}"
        errors = ", ".join(f"{k}: {v}" for k, v in f.errors.items()) or "none"
        rows.append(
            f"| {f.backend} | {f.name} | {f.requests_per_s:,} | {f.p50_ms} | {f.p99_ms} | "
            f"{f.max_ms} | {f.server_cpu_percent} | {f.server_cpu_ms_per_request} | "
            f"{f.wrk_cpu_percent} | {f.machine_cpu_percent:.0f} | {f.load_average} | "
            f"{written} | {errors} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracking", description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--emails", type=int, default=2000)
    parser.add_argument("--links", type=int, default=25, help="distinct links per email")
    parser.add_argument("--open-emails", type=int, default=100, help="emails whose pixels are hit")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--hello", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hello:
        serve_hello(args.hello)
        return
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    figures: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-tracking-") as tmp:
        for name in backends:
            figures += _run_backend(name, args, Path(tmp) / name)
            print(table([f for f in figures if f.backend == name]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"tracking-{stamp}.json"
    out.write_text(
        json.dumps({"args": vars(args), "figures": [asdict(f) for f in figures]}, indent=2)
    )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
