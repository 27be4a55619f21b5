"""``python -m bench.serve``: ``posthaste serve`` exactly as a user starts it, beside Postfix.

For each backend (``--backend sqlite|postgres|both``): a counting sink (``bench/sink.py``), a
loopback DNS server standing in for the user's DNS host (``tests/dns_server.py``), and
``posthaste serve`` with its defaults and nothing set but ``POSTHASTE_DATA_DIR``,
``_HTTP_PORT``, ``_SMTP_RELAY_PORT``, ``_SMTP_RELAY_TLS_PORT=0``, ``_SMTP_INBOUND_PORT`` (a free
port: its default, 2525, may be taken),
``_DELIVERY=smtp://127.0.0.1:<sink>?tls=none``, ``_DNS_NAMESERVERS`` and, on PostgreSQL,
``_DATABASE_URL`` and ``_SECRET_KEY`` (no role, no process count: whatever ``serve`` runs by
default, one process or a supervised tree). As a user would, it reads the live key from
``bootstrap-keys.txt``, adds ``acme.test`` through the API, publishes its records in the DNS
server and verifies it: mail is DKIM-signed with the server's own key and sent with the live
key (test keys never deliver).

Then, in this order, each waiting until the sink has every message before the next:

- the paced ``POST /emails`` at ``--rate`` (500/s, open loop: latency from the scheduled send
  time) for ``--duration`` seconds after ``--warmup``, on an idle server: p50, p99;
- the pipeline: ``--emails`` emails (20,000) as ``POST /emails/batch`` of 100, 8 requests in
  flight; from the first request until the sink has them all (``XCOUNT``), and the acceptance
  rate alone (accepted while delivering);
- the relay end to end: ``--relay-messages`` (as many) over 16 SMTP connections, each with
  STARTTLS and AUTH (user ``posthaste``, the live key), until the sink has them all;
- the paced ``POST /emails`` again while a pipeline of ``--busy-emails`` (20,000) is accepted
  and delivered, and the share of the measured window during which it was being delivered;
- the batch acceptance alone: ``--alone-emails`` (20,000) as the pipeline's batches, each
  email scheduled a day ahead, so nothing is delivered beside them (last: they stay queued).

CPU % of the server's process tree (its pid and every descendant, reaped ones included), of the
sink and of PostgreSQL (every ``postgres`` process on the box, and this database's own
backends) for each; the tree's memory (RSS summed, and PSS) at rest before and after the load
and at its peak during each measurement.

Postfix in the same run (``bench/postfix.py``, where installed): relaying to the same sink
``--emails`` unsigned copies of a message the server built (the probe email's
``GET /emails/{id}/raw``: the same size, less the DKIM signature) over 16 connections, and
accepting ``--relay-messages`` of the relay's message with the relay's certificate, STARTTLS and
AUTH and relaying them to the sink. Prints markdown tables, the ratios to Postfix and the
targets, and writes ``bench/results/serve-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import multiprocessing
import os
import shlex
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson
import uvloop
from tests.dns_server import ZoneServer, running_zone

from bench import (
    commit_probe,
    cpu,
    load,
    payload,
    postfix,
    relay,
    report,
    server,
    server_latency,
    sink,
)
from bench.stats import Measurement, Recorder

RESULTS = Path(__file__).resolve().parent / "results"
DOMAIN = "acme.test"
BATCH = 100
IN_FLIGHT = 8  # batch requests in flight
RELAY_CONNECTIONS = 16
POSTFIX_CONNECTIONS = 16
RELAY_USER = "posthaste"
MEMORY_EVERY = 0.25  # seconds between samples of the tree's memory
MIB = 2**20

# The targets (issue #18): PostgreSQL unless the backend is named.
PIPELINE_RATIO = {"postgres": 1.3, "sqlite": 1.0}
RELAY_RATIO = 1.3
P99_IDLE_MS = 20.0
P99_BUSY_MS = 50.0
BATCH_ACCEPTED_PER_S = 10_000.0
TREE_MEMORY_MIB = 400.0


# --- the server, as a user starts it --------------------------------------------------------


@dataclass(frozen=True)
class Serve:
    """A running ``posthaste serve`` and what a user learns of it."""

    pid: int
    url: str
    relay_port: int
    inbound_port: int
    live_key: str
    cert: Path  # the relay's self-signed certificate (and key beside it)
    log: Path
    database_url: str  # "" on SQLite

    @property
    def probe_dsn(self) -> str:
        """The raw baseline's database, in the server's cluster ("" on SQLite): where
        ``bench.commit_probe`` commits beside a paced row."""
        return self.database_url + server.RAW_SUFFIX if self.database_url else ""


def user_env(
    backend: server.Backend,
    ports: dict[str, int],
    extra: dict[str, str] | None = None,
    code: Path | None = None,
) -> dict[str, str]:
    """This environment without any ``POSTHASTE_`` variable, plus only what a user sets (and
    ``extra``: a benchmark's own settings, ``POSTHASTE_PUBLIC_URL`` say); the server runs this
    checkout's code, or that of ``code`` (another checkout's ``src``)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("POSTHASTE_")}
    env |= {
        "PYTHONPATH": server.pythonpath(code),  # this checkout's code, not the installed one
        "POSTHASTE_DATA_DIR": str(backend.data_dir),
        "POSTHASTE_HTTP_PORT": str(ports["http"]),
        "POSTHASTE_SMTP_RELAY_PORT": str(ports["relay"]),
        "POSTHASTE_SMTP_RELAY_TLS_PORT": "0",
        # A port of its own, not the default 2525: another server on the box may hold that one.
        "POSTHASTE_SMTP_INBOUND_PORT": str(ports["inbound"]),
        "POSTHASTE_DELIVERY": f"smtp://127.0.0.1:{ports['sink']}?tls=none",
        "POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{ports['dns']}",
    }
    if backend.server_database_url:
        env["POSTHASTE_DATABASE_URL"] = backend.server_database_url
        env["POSTHASTE_SECRET_KEY"] = server.SECRET_KEY
    return env | (extra or {})


def bootstrap_live_key(data_dir: Path) -> str:
    """The ``live key: ph_live_…`` line the first start writes."""
    for line in (data_dir / "bootstrap-keys.txt").read_text().splitlines():
        mode, _, token = line.partition(" key: ")
        if mode.strip() == "live":
            return token.strip()
    raise RuntimeError(f"no live key in {data_dir / 'bootstrap-keys.txt'}")


@contextlib.contextmanager
def started(
    backend: server.Backend,
    sink_port: int,
    dns_port: int,
    extra_env: dict[str, str] | None = None,
    code: Path | None = None,
) -> Iterator[Serve]:
    backend.data_dir.mkdir(parents=True, exist_ok=True)
    ports = {
        "http": server.free_port(),
        "relay": server.free_port(),
        "inbound": server.free_port(),
        "sink": sink_port,
        "dns": dns_port,
    }
    log = backend.workdir / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *server.SERVE],
            env=user_env(backend, ports, extra_env, code),
            cwd=backend.workdir,
            stdout=out,
            stderr=out,
        )
    try:
        url = f"http://127.0.0.1:{ports['http']}"
        server._wait_ready(url, process, log)
        relay._wait_for_banner(ports["relay"], process, log)
        cert = backend.data_dir / "smtp-tls-cert.pem"
        key = bootstrap_live_key(backend.data_dir)
        relay._wait_for_banner(ports["inbound"], process, log)
        yield Serve(
            process.pid,
            url,
            ports["relay"],
            ports["inbound"],
            key,
            cert,
            log,
            backend.server_database_url,
        )
    finally:
        _stop_tree(process)


def _stop_tree(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server (as a user's Ctrl-C or service manager does); any descendant
    still alive after it exited (a supervisor's child left behind) is stopped too."""
    descendants = cpu.tree_pids(process.pid)[1:]
    server._stop(process)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = [pid for pid in descendants if cpu.alive(pid)]
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(cpu.alive(pid) for pid in left):
            time.sleep(0.1)


# --- what the run measures with -------------------------------------------------------------


@dataclass
class Run:
    serve: Serve
    sink_port: int
    sink_pid: int
    zone: ZoneServer
    http: aiohttp.ClientSession
    expected: int = 0  # messages accepted so far: the sink must take as many
    raw: bytes = b""  # a message the server built (the probe's), for Postfix

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.serve.live_key}"}

    def log_tail(self) -> str:
        return self.serve.log.read_text(errors="replace")[-3000:]

    async def drained(self) -> float:
        """Until the sink has every message accepted so far; when it had them."""
        return await sink.until_counted(self.sink_port, self.expected, self.log_tail)

    def memory(self) -> cpu.Memory:
        return cpu.memory(cpu.tree_pids(self.serve.pid))


class NotYet(RuntimeError):
    """A 404: what was asked for does not exist (yet)."""


async def _api(run: Run, method: str, path: str, body: Any = None) -> Any:
    async with run.http.request(
        method, run.serve.url + path, json=body, headers=run.auth
    ) as answer:
        data = await answer.read()
        if answer.status == 404:
            raise NotYet(f"{method} {path}: {data[:500]!r}")
        if answer.status >= 300:
            raise RuntimeError(f"{method} {path}: {answer.status} {data[:500]!r}")
        return orjson.loads(data) if answer.content_type == "application/json" else data


async def set_up(run: Run, *, receiving: bool = False) -> None:
    """Add the domain (with receiving on, if asked), publish its records, verify it; then one
    email through, end to end."""
    domain = await _api(run, "POST", "/domains", {"name": DOMAIN, "receiving": receiving})
    for record in domain["records"]:
        if record["type"] == "TXT":
            run.zone.add(record["name"], "TXT", record["value"])
        else:
            run.zone.add(record["name"], "MX", (record["priority"], record["value"]))
    deadline = time.monotonic() + 60
    while (await _api(run, "POST", f"/domains/{domain['id']}/verify"))["status"] != "verified":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{DOMAIN} did not verify:\n{run.log_tail()}")
        await asyncio.sleep(0.2)
    probe = await _api(run, "POST", "/emails", payload.email(0))
    run.expected += 1
    await run.drained()
    deadline = time.monotonic() + 60
    while not run.raw:  # stored with the delivery's outcome, just after the sink's 250
        try:
            run.raw = await _api(run, "GET", f"/emails/{probe['id']}/raw")
        except NotYet:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _database_cpu(url: str) -> dict[int, float]:
    """CPU seconds so far of each backend of the server's own database (PostgreSQL only)."""
    if not url:
        return {}
    conn = await asyncpg.connect(url, timeout=10)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return {row["pid"]: cpu.process_seconds(row["pid"]) for row in rows}


@dataclass
class Usage:
    cpu_pct: dict[str, float] = field(default_factory=dict)
    server_seconds: float = 0.0  # CPU of the server's tree
    peak_rss_mib: float = 0.0
    peak_pss_mib: float = 0.0
    processes: int = 0  # the most the server's tree had at once

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_pct": self.cpu_pct,
            "server_cpu_seconds": round(self.server_seconds, 3),
            "peak_rss_mib": self.peak_rss_mib,
            "peak_pss_mib": self.peak_pss_mib,
            "processes": self.processes,
        }


@contextlib.asynccontextmanager
async def watched(run: Run) -> AsyncIterator[Usage]:
    """CPU of the server's tree, the sink and PostgreSQL over the block, and the tree's peak
    memory, sampled every MEMORY_EVERY seconds meanwhile."""
    usage = Usage()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def sample(pool: ProcessPoolExecutor) -> None:
        while True:
            held, processes = await loop.run_in_executor(pool, cpu.tree_memory, run.serve.pid)
            usage.peak_rss_mib = max(usage.peak_rss_mib, held.rss_mib)
            usage.peak_pss_mib = max(usage.peak_pss_mib, held.pss_mib)
            usage.processes = max(usage.processes, processes)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), MEMORY_EVERY)
                return

    groups = {"sink": [run.sink_pid]}
    trees = {"server": run.serve.pid}
    before = cpu.snapshot(groups, trees)
    database_before = await _database_cpu(run.serve.database_url)
    # Sampled in a process of its own: walking /proc and reading each process's smaps_rollup
    # takes 5-7 ms of CPU (more on a full box), which in this process would hold up the load
    # generator's event loop four times a second, its requests sent and answers read late.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        sampler = asyncio.create_task(sample(pool))
        try:
            yield usage
        finally:
            stop.set()
            await sampler
    after = cpu.snapshot(groups, trees)
    database_after = await _database_cpu(run.serve.database_url)
    shares = cpu.usage(before, after)
    usage.server_seconds = after.processes["server"] - before.processes["server"]
    usage.cpu_pct = {
        label: shares[f"{label}_pct"] for label in ("server", "sink", "postgres", "machine")
    }
    if run.serve.database_url:
        seconds = sum(t - database_before.get(pid, 0.0) for pid, t in database_after.items())
        usage.cpu_pct["database"] = round(100 * seconds / (after.wall - before.wall), 1)


# --- the measurements -----------------------------------------------------------------------


def _batch_target(run: Run, scheduled_at: str | None = None) -> load.Target:
    bodies = payload.batch_bodies(BATCH, scheduled_at=scheduled_at)
    return load.Target(
        [run.serve.url + "/emails/batch"], run.serve.live_key, bodies, load.count_batch
    )


async def _accept(run: Run, emails: int, scheduled_at: str | None = None) -> tuple[Recorder, float]:
    """``emails`` as batches of BATCH, IN_FLIGHT at once; the recorder, and the accepted/s.
    Emails scheduled for later are not expected at the sink."""
    started = time.perf_counter()
    recorder = await load.counted(_batch_target(run, scheduled_at), emails // BATCH, IN_FLIGHT)
    if scheduled_at is None:
        run.expected += recorder.accepted
    if not recorder.accepted:
        raise RuntimeError(f"no batch accepted: {dict(recorder.errors)}\n{run.log_tail()}")
    return recorder, recorder.accepted / (recorder.last_end - started)


async def pipeline(run: Run, emails: int) -> dict[str, Any]:
    async with watched(run) as usage:
        started = time.perf_counter()
        recorder, accepted_per_s = await _accept(run, emails)
        done = await run.drained()
    return {
        "emails": recorder.accepted,
        "errors": dict(recorder.errors),
        "seconds": round(done - started, 3),
        "per_s": round(recorder.accepted / (done - started), 1),
        "server_cpu_ms": _cpu_ms(usage, recorder.accepted),
        "accepted_per_s": round(accepted_per_s, 1),
        **usage.as_dict(),
    }


async def accepting_alone(run: Run, emails: int) -> dict[str, Any]:
    """The pipeline's batches again, each email scheduled a day ahead: stored as a send is
    (its row, recipients, tag, subject, first event and delivery job, in the same statement),
    with nothing delivered beside them; what the acceptance costs when it has the box. Run
    last: the scheduled emails stay in the queue."""
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    async with watched(run) as usage:
        recorder, accepted_per_s = await _accept(run, emails, later.isoformat())
    return {
        "emails": recorder.accepted,
        "errors": dict(recorder.errors),
        "accepted_per_s": round(accepted_per_s, 1),
        "server_cpu_ms": _cpu_ms(usage, recorder.accepted),
        **usage.as_dict(),
    }


def _cpu_ms(usage: Usage, messages: int) -> float:
    """CPU milliseconds the server's tree spent per message."""
    return round(1000 * usage.server_seconds / messages, 3)


def _relay_message() -> sink.Message:
    template = relay.sample_message("{rcpt}")
    return lambda rcpt: template.replace(b"{rcpt}", rcpt.encode())


async def relay_end_to_end(run: Run, messages: int) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(run.serve.cert))
    login = (RELAY_USER, run.serve.live_key)
    async with watched(run) as usage:
        started = time.perf_counter()
        accepted, refused = await sink.submit(
            run.serve.relay_port, messages, RELAY_CONNECTIONS, _relay_message(), context, login
        )
        submitted = time.perf_counter() - started
        run.expected += accepted
        done = await run.drained()
    if not accepted:
        raise RuntimeError(f"the relay accepted nothing: {dict(refused)}\n{run.log_tail()}")
    return {
        "messages": accepted,
        "errors": dict(refused),
        "seconds": round(done - started, 3),
        "per_s": round(accepted / (done - started), 1),
        "server_cpu_ms": _cpu_ms(usage, accepted),
        "accepted_per_s": round(accepted / submitted, 1),
        **usage.as_dict(),
    }


async def paced(run: Run, args: argparse.Namespace, busy_emails: int = 0) -> dict[str, Any]:
    """``POST /emails`` at ``args.rate``/s, open loop; with ``busy_emails``, a pipeline of that
    many is accepted (and delivered) from the same moment on."""
    accepted = 0

    def counting(status: int, body: bytes) -> int:  # every answer, the warm-up's too
        nonlocal accepted
        taken = load.count_single(status, body)
        accepted += taken
        return taken

    bodies = payload.single_bodies()
    target = load.Target([run.serve.url + "/emails"], run.serve.live_key, bodies, counting)
    start = time.perf_counter() + args.warmup
    window = (start, start + args.duration)
    async with watched(run) as usage:
        busy = asyncio.create_task(_accept(run, busy_emails)) if busy_emails else None
        first = asyncio.create_task(_scrape_at(run.serve.url, start))
        probe = commit_probe.beside(run.serve.probe_dsn, window[1])
        outcome = await load.open_loop(target, args.rate, window)
        own = server_latency.summary(await first, await _scrape_at(run.serve.url, 0.0))
        bare = await probe.between(*window) if probe is not None else None
        if busy is not None:
            await busy
        run.expected += accepted
        done = await run.drained()
    measured = Measurement.of(
        f"POST /emails at {args.rate:g}/s",
        "http",
        outcome.recorder,
        concurrency=0,
        emails_per_request=1,
        window_start=start,
    )
    result = {
        "rate": args.rate,
        "requests": measured.requests,
        "requests_per_s": round(measured.requests_per_s, 1),
        "sustained": measured.requests_per_s >= 0.98 * args.rate and not measured.errors,
        "p50_ms": round(measured.p50_ms, 2),
        "p99_ms": round(measured.p99_ms, 2),
        "max_ms": round(measured.max_ms, 2),
        "errors": measured.errors,
        "max_dispatch_lag_ms": round(outcome.max_dispatch_lag_ms, 2),
        "server_own": own,
        "bare_commit": bare,
        **usage.as_dict(),
    }
    if busy_emails:  # how much of the window the pipeline was being delivered in
        share = (done - window[0]) / args.duration
        result["pipeline_emails"] = busy_emails
        result["delivering_share_of_window"] = round(min(1.0, max(0.0, share)), 2)
    return result


async def _scrape_at(url: str, moment: float) -> server_latency.Buckets:
    """The server's own latency buckets of ``POST /emails`` at ``moment`` (perf_counter)."""
    await asyncio.sleep(max(0.0, moment - time.perf_counter()))
    return await server_latency.scrape(url, "/emails")


async def postfix_figures(run: Run, emails: int, messages: int) -> dict[str, Any]:
    """Postfix relaying the server's message (unsigned) to the sink, and accepting the relay's
    message with STARTTLS and AUTH and relaying it: both from first submission to the sink."""
    raw = run.raw
    cert = run.serve.cert
    return {
        "pipeline": await postfix.relay_to_sink(
            run.sink_port, run.sink_pid, emails, POSTFIX_CONNECTIONS, lambda _: raw
        ),
        "relay": await postfix.relay_to_sink(
            run.sink_port,
            run.sink_pid,
            messages,
            POSTFIX_CONNECTIONS,
            _relay_message(),
            (cert, cert.with_name("smtp-tls-key.pem")),
        ),
    }


async def measure(
    serve: Serve, sink_port: int, sink_pid: int, zone: ZoneServer, args: argparse.Namespace
) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = Run(serve, sink_port, sink_pid, zone, http)
        await set_up(run)
        rest = run.memory()
        results: dict[str, Any] = {
            "message_bytes": len(run.raw),
            "rest_before": {"rss_mib": rest.rss_mib, "pss_mib": rest.pss_mib},
        }
        print("  paced, idle ...", flush=True)
        results["paced_idle"] = await paced(run, args)
        print("  pipeline ...", flush=True)
        results["pipeline"] = await pipeline(run, args.emails)
        print("  relay end to end ...", flush=True)
        results["relay"] = await relay_end_to_end(run, args.relay_messages)
        print("  paced, while a pipeline is delivered ...", flush=True)
        results["paced_busy"] = await paced(run, args, args.busy_emails)
        print("  batch acceptance, nothing delivered meanwhile ...", flush=True)
        results["accepting_alone"] = await accepting_alone(run, args.alone_emails)
        rest = run.memory()
        results["rest_after"] = {"rss_mib": rest.rss_mib, "pss_mib": rest.pss_mib}
        if args.postfix and postfix.available():
            print("  Postfix ...", flush=True)
            results["postfix"] = await postfix_figures(run, args.emails, args.relay_messages)
        return results


@dataclass
class Around:
    """What ``posthaste serve`` is measured with: its database, the DNS server standing in for
    the user's DNS host, and the counting sink it delivers to."""

    backend: server.Backend
    zone: ZoneServer
    sink_port: int
    sink_pid: int


@contextlib.contextmanager
def surroundings(name: str, workdir: Path) -> Iterator[Around]:
    """A fresh database of backend ``name`` in ``workdir``, a DNS server and a sink."""
    sink_port = server.free_port()
    with (
        server.prepared(name, workdir) as backend,
        contextlib.contextmanager(running_zone)() as zone,
        sink.running(sink_port) as sink_pid,
    ):
        yield Around(backend, zone, sink_port, sink_pid)


@contextlib.contextmanager
def serving(
    name: str,
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    code: Path | None = None,
) -> Iterator[tuple[Around, Serve]]:
    """``surroundings``, and ``posthaste serve`` started in them as a user starts it."""
    with (
        surroundings(name, workdir) as around,
        started(around.backend, around.sink_port, around.zone.port, extra_env, code) as serve,
    ):
        yield around, serve


def run_backend(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    print(f"[{name}] starting posthaste serve ...", flush=True)
    with serving(name, workdir / name) as (around, serve):
        return uvloop.run(measure(serve, around.sink_port, around.sink_pid, around.zone, args))


# --- the report -----------------------------------------------------------------------------


def _cpu(figures: dict[str, Any]) -> str:
    shares = figures["cpu_pct"]
    database = f" ({shares['database']:.0f} own db)" if "database" in shares else ""
    return (
        f"{shares['server']:.0f} / {shares['sink']:.0f} / {shares['postgres']:.0f}{database}"
        f" / {shares['machine']:.0f}"
    )


def table(name: str, results: dict[str, Any]) -> str:
    pf = results.get("postfix") or {}
    pipe, relayed = results["pipeline"], results["relay"]
    busy, alone = results["paced_busy"], results["accepting_alone"]
    before, after = results["rest_before"], results["rest_after"]
    rows = [
        f"### {name}",
        "",
        "| measurement | Posthaste | Postfix, same run | ratio | server CPU ms/message "
        "(Postfix's) | CPU % server tree / sink / postgres / box | tree peak MiB (RSS / PSS) |",
        "|---|---:|---:|---:|---:|---|---|",
        _end_to_end_row(
            f"pipeline: {pipe['emails']:,} emails, batches of {BATCH} x {IN_FLIGHT} in flight, "
            "accept → at the sink",
            pipe,
            pf.get("pipeline"),
        ),
        f"| batch acceptance, while delivering | {pipe['accepted_per_s']:,.0f}/s | "
        f"{_accepting(pf.get('pipeline'))} | | | | |",
        f"| batch acceptance, {alone['emails']:,} emails scheduled a day ahead (nothing "
        f"delivered meanwhile) | {alone['accepted_per_s']:,.0f}/s | | | "
        f"{alone['server_cpu_ms']:.3f} | {_cpu(alone)} | "
        f"{alone['peak_rss_mib']:.0f} / {alone['peak_pss_mib']:.0f} |",
        _end_to_end_row(
            f"relay end to end: {relayed['messages']:,} messages, {RELAY_CONNECTIONS} "
            "connections, STARTTLS + AUTH",
            relayed,
            pf.get("relay"),
        ),
        f"| relay acceptance, while delivering | {relayed['accepted_per_s']:,.0f}/s | "
        f"{_accepting(pf.get('relay'))} | | | | |",
        _paced_row("idle", results["paced_idle"]),
        _paced_row(
            f"while {busy['pipeline_emails']:,} emails are delivered "
            f"({busy['delivering_share_of_window']:.0%} of the window)",
            busy,
        ),
        f"| tree memory at rest, before / after the load ({pipe['processes']} process(es)) | "
        f"{before['rss_mib']:.0f} / {after['rss_mib']:.0f} MiB RSS | | | | | "
        f"PSS {before['pss_mib']:.0f} / {after['pss_mib']:.0f} |",
    ]
    found = targets(name, results)
    if found:
        rows += ["", "| target | reached | met |", "|---|---|---|"]
        rows += [f"| {t} | {reached} | {'yes' if met else '**no**'} |" for t, reached, met in found]
    return "\n".join(rows)


def _end_to_end_row(label: str, ours: dict[str, Any], theirs: dict[str, Any] | None) -> str:
    postfix_cell = f"{theirs['per_s']:,.0f}/s" if theirs else "not measured"
    ratio = f"{ours['per_s'] / theirs['per_s']:.2f}x" if theirs else "-"
    postfix_cpu = f" ({theirs['postfix_cpu_ms']:.2f})" if theirs else ""
    return (
        f"| {label} | {ours['per_s']:,.0f}/s | {postfix_cell} | {ratio} | "
        f"{ours['server_cpu_ms']:.2f}{postfix_cpu} | {_cpu(ours)} | "
        f"{ours['peak_rss_mib']:.0f} / {ours['peak_pss_mib']:.0f} |"
    )


def _accepting(theirs: dict[str, Any] | None) -> str:
    return f"{theirs['accept_per_s']:,.0f}/s" if theirs else ""


def _paced_row(label: str, figures: dict[str, Any]) -> str:
    sustained = "" if figures["sustained"] else " **not sustained**"
    errors = sum(figures["errors"].values())
    return (
        f"| `POST /emails` at {figures['rate']:g}/s ({figures['requests_per_s']:,.0f}/s "
        f"reached), {label}{sustained} | p50 {figures['p50_ms']:.1f} ms, "
        f"p99 {figures['p99_ms']:.1f} ms{f', {errors} errors' if errors else ''}"
        f"{_own(figures)}{commit_probe.line(figures.get('bare_commit'))} | | | | "
        f"{_cpu(figures)} | {figures['peak_rss_mib']:.0f} / {figures['peak_pss_mib']:.0f} |"
    )


def _own(figures: dict[str, Any]) -> str:
    """The server's own view (``bench/server_latency.py``): the share it answered within
    20 and 50 ms (the two targets), the smallest bucket bound within which it answered 99 %,
    and how late the load generator sent at worst."""
    own = figures.get("server_own") or {}
    if not own.get("requests"):
        return ""
    shares = ", ".join(
        f"{own['within_ms'].get(bound, 0.0):.1%} within {bound} ms" for bound in ("20", "50")
    )
    p99 = own["p99_within_ms"]
    return (
        f"; the server's own: {shares}, 99 % within "
        f"{f'{p99:g} ms' if p99 is not None else 'the last bucket'}; the load generator "
        f"up to {figures['max_dispatch_lag_ms']:.0f} ms late"
    )


def targets(name: str, results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(target, reached, met) for the targets that apply to ``name``'s results."""
    found: list[tuple[str, str, bool]] = []
    pf = results.get("postfix")
    pipe = results["pipeline"]
    if pf:
        ratio = pipe["per_s"] / pf["pipeline"]["per_s"]
        wanted = PIPELINE_RATIO[name]
        found.append((f"pipeline ≥ {wanted}x Postfix", f"{ratio:.2f}x", ratio >= wanted))
    if name != "postgres":
        return found
    if pf:
        ratio = results["relay"]["per_s"] / pf["relay"]["per_s"]
        found.append(
            (f"relay end to end ≥ {RELAY_RATIO}x Postfix", f"{ratio:.2f}x", ratio >= RELAY_RATIO)
        )
    for key, limit, label in (
        ("paced_idle", P99_IDLE_MS, "idle"),
        ("paced_busy", P99_BUSY_MS, "while the pipeline is delivering"),
    ):
        figures = results[key]
        met = figures["sustained"] and figures["p99_ms"] <= limit
        found.append((f"p99 ≤ {limit:g} ms {label}", f"{figures['p99_ms']:.1f} ms", met))
    for rate, label in (
        (results["accepting_alone"]["accepted_per_s"], "nothing delivered meanwhile"),
        (pipe["accepted_per_s"], "while delivering"),
    ):
        found.append(
            (
                f"batch ≥ {BATCH_ACCEPTED_PER_S:,.0f} emails/s accepted, {label}",
                f"{rate:,.0f}/s",
                rate >= BATCH_ACCEPTED_PER_S,
            )
        )
    peak = max(results[key]["peak_rss_mib"] for key in ("pipeline", "paced_busy"))
    rest = max(results["rest_before"]["rss_mib"], results["rest_after"]["rss_mib"])
    found.append(
        (
            f"tree RSS < {TREE_MEMORY_MIB:g} MB at rest and during the pipeline",
            f"{rest:.0f} MiB at rest, {peak:.0f} MiB peak",
            max(rest, peak) * MIB < TREE_MEMORY_MIB * 1e6,
        )
    )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--emails", type=int, default=20_000, help="the pipeline's emails")
    parser.add_argument(
        "--relay-messages", type=int, default=None, help="relayed messages (default: --emails)"
    )
    parser.add_argument(
        "--busy-emails",
        type=int,
        default=20_000,
        help="the pipeline delivered under the second paced load",
    )
    parser.add_argument(
        "--alone-emails",
        type=int,
        default=20_000,
        help="batch emails accepted with nothing delivered (scheduled a day ahead)",
    )
    parser.add_argument("--rate", type=float, default=500.0, help="paced POST /emails per second")
    parser.add_argument("--duration", type=float, default=15.0, help="paced seconds measured")
    parser.add_argument("--warmup", type=float, default=3.0, help="paced seconds first, unmeasured")
    parser.add_argument(
        "--no-postfix", dest="postfix", action="store_false", help="skip the Postfix figures"
    )
    args = parser.parse_args(argv)
    if args.relay_messages is None:
        args.relay_messages = args.emails
    stamp = time.strftime("%Y%m%dT%H%M%S")
    document: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "bench.serve", *(argv or sys.argv[1:])]),
        "started": stamp,
        "machine": report.machine("uvloop"),
        "settings": vars(args),
        "postfix_available": postfix.available(),
        "backends": {},
    }
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-serve-") as workdir:
        for name in backends:
            results = run_backend(name, args, Path(workdir))
            document["backends"][name] = {
                **results,
                "targets": [
                    {"target": t, "reached": reached, "met": met}
                    for t, reached, met in targets(name, results)
                ],
            }
            print("\n" + table(name, results) + "\n", flush=True)
    path = RESULTS / f"serve-{stamp}.json"
    report.write_json(path, document)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
