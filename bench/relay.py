"""``python -m bench.relay``: SMTP relay acceptance, beside a bare aiosmtpd sink's, same client.

For each backend: a real ``posthaste serve --role smtp`` on a fresh database, and a baseline
process running a bare aiosmtpd server with the same TLS certificate, STARTTLS and AUTH, whose
DATA handler only answers 250 (what aiosmtpd itself costs, with no parsing and no database).
Then, where Postfix is installed (``bench/postfix.py``), the figure the issue quotes: a Postfix
of the run's own with the same certificate, STARTTLS and AUTH PLAIN (Cyrus SASL, a sasldb),
putting every message it accepts on hold (queued and synced to disk, never delivered), as the
relay role stores a message and leaves its delivery to the workers. Its server CPU is that of
all its processes (``master`` and the ``smtpd``, ``cleanup`` and other daemons it starts).
The load generator is ``aiosmtplib`` on uvloop in this process: ``--connections`` connections
(16 by default), each doing STARTTLS and AUTH once, then submitting messages back to back
(MAIL, RCPT, DATA per message; about 2 KB, text and html, a new recipient each).
Messages/s counts 250 replies completed inside the measured window. Prints a markdown table
and writes ``bench/results/relay-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from pathlib import Path
from typing import Any

import aiosmtplib

from bench import cpu, postfix, server
from bench.stats import percentile

RESULTS = Path(__file__).resolve().parent / "results"
READY_TIMEOUT = 60.0


@dataclass
class Figures:
    name: str
    connections: int
    seconds: float
    messages: int
    messages_per_s: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    # CPU of the server database's own backends per message (PostgreSQL only; None: not known)
    database_cpu_ms_per_message: float | None = None

    @property
    def server_cpu_ms_per_message(self) -> float:
        """CPU the server process spent per message: what bounds it on a core of its own."""
        busy = self.cpu.get("server_pct", 0.0) / 100 * self.seconds
        return round(1000 * busy / self.messages, 2) if self.messages else 0.0


def sample_message(recipient: str = "customer@example.com") -> bytes:
    msg = EmailMessage()
    msg["From"] = "Acme <hello@acme.test>"
    msg["To"] = f"Customer <{recipient}>"
    msg["Subject"] = "Your receipt for order 1234"
    msg["X-Posthaste-Tags"] = "kind=receipt"
    line = "Thank you for your order. Your items will ship within two business days.\n"
    msg.set_content(line * 12)
    msg.add_alternative("<p>" + line * 12 + "</p>", subtype="html")
    return msg.as_bytes(policy=SMTP_POLICY)


def recipients(connection: int, domain: str = "example.com") -> Iterator[str]:
    """A new recipient for every message: address validation is not cached away."""
    for number in itertools.count():
        yield f"customer-{connection}-{number}@{domain}"


@dataclass(frozen=True)
class Target:
    """Where the load goes: a port, the AUTH user and password, how to count server CPU."""

    name: str
    port: int
    user: str
    password: str
    pids: tuple[int, ...]
    tree: bool = False  # count the process's children too (Postfix's daemons)
    domain: str = "example.com"  # of the recipients
    login: bool = True  # AUTH after STARTTLS (an MX takes mail without)
    database_url: str = ""  # the server's PostgreSQL database, whose backends' CPU is counted


async def _connection(
    target: Target, context: ssl.SSLContext, window: tuple[float, float], connection: int
) -> tuple[list[float], Counter[str]]:
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    client = aiosmtplib.SMTP(
        hostname="127.0.0.1", port=target.port, tls_context=context, timeout=60
    )
    await client.connect(start_tls=True)
    if target.login:
        await client.login(target.user, target.password)
    start, end = window
    template = sample_message("{rcpt}")
    for rcpt in recipients(connection, target.domain):
        now = time.perf_counter()
        if now >= end:
            break
        raw = template.replace(b"{rcpt}", rcpt.encode())
        try:
            await client.sendmail("hello@acme.test", [rcpt], raw)
        except aiosmtplib.SMTPResponseException as exc:
            if now >= start:
                errors[f"{exc.code}"] += 1
            continue
        done = time.perf_counter()
        if now >= start and done <= end:
            latencies.append(done - now)
    await client.quit()
    return latencies, errors


async def measure(
    target: Target, cafile: Path, connections: int, warmup: float, duration: float
) -> Figures:
    context = ssl.create_default_context(cafile=str(cafile))
    start = time.perf_counter() + warmup
    window = (start, start + duration)
    pids = {"client": [os.getpid()]}
    if target.tree:
        usage = asyncio.create_task(
            cpu.during(pids, start, start + duration, trees={"server": target.pids[0]})
        )
    else:
        usage = asyncio.create_task(
            cpu.during({**pids, "server": list(target.pids)}, start, start + duration)
        )
    database = asyncio.create_task(_database_seconds(target.database_url, window))
    results = await asyncio.gather(
        *(_connection(target, context, window, n) for n in range(connections))
    )
    database_seconds = await database
    latencies = sorted(value for values, _ in results for value in values)
    errors: Counter[str] = Counter()
    for _, counted in results:
        errors.update(counted)
    return Figures(
        name=target.name,
        connections=connections,
        seconds=duration,
        messages=len(latencies),
        messages_per_s=round(len(latencies) / duration, 1),
        p50_ms=round(percentile(latencies, 0.5) * 1000, 2),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 2),
        errors=dict(errors),
        cpu=await usage,
        database_cpu_ms_per_message=(
            round(1000 * database_seconds / len(latencies), 3)
            if database_seconds is not None and latencies
            else None
        ),
    )


async def _database_seconds(url: str, window: tuple[float, float]) -> float | None:
    """CPU seconds the server database's own backends spent in the measured window."""
    if not url:
        return None
    from bench.serve import _database_cpu

    await asyncio.sleep(max(0.0, window[0] - time.perf_counter()))
    before = await _database_cpu(url)
    await asyncio.sleep(max(0.0, window[1] - time.perf_counter()))
    after = await _database_cpu(url)
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


# --- the baseline: a bare aiosmtpd server ---------------------------------------------------


async def run_sink(port: int, cert: Path, key: Path, auth: bool = True) -> None:
    from aiosmtpd.smtp import SMTP, AuthResult

    class Sink:
        async def handle_DATA(self, srv: Any, session: Any, envelope: Any) -> str:
            return f"250 OK {uuid.uuid4()}"

    def accept_any(*_: Any) -> AuthResult:
        return AuthResult(success=True)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(
        lambda: SMTP(
            Sink(),
            hostname="sink",
            tls_context=context,
            require_starttls=auth,
            auth_required=auth,
            authenticator=accept_any,
            data_size_limit=25 * 1024 * 1024,
            enable_SMTPUTF8=True,
        ),
        "127.0.0.1",
        port,
    )
    async with srv:
        await srv.serve_forever()


# --- processes ---------------------------------------------------------------------------------


def _wait_for_banner(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited early:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(64).startswith(b"220"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"not ready:\n{log.read_text()}")


def _wait_for_listener(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``process`` itself listens on ``port`` (which others may share: SO_REUSEPORT)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited early:\n{log.read_text()}")
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        listening = {  # local address, state LISTEN (0A), inode
            row[9] for row in rows if row[1].endswith(f":{port:04X}") and row[3] == "0A"
        }
        with contextlib.suppress(OSError):
            fds = Path(f"/proc/{process.pid}/fd").iterdir()
            links = {os.readlink(fd) for fd in fds}
            if any(f"socket:[{inode}]" in links for inode in listening):
                return
        time.sleep(0.1)
    raise RuntimeError(f"not listening:\n{log.read_text()}")


@contextmanager
def _process(
    args: list[str], env: dict[str, str], cwd: Path, port: int, log: Path, shared: bool = False
) -> Iterator[int]:
    with log.open("wb") as out:
        process = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=out)
    try:
        if shared:
            _wait_for_listener(port, process, log)
        else:
            _wait_for_banner(port, process, log)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def relay_server(
    backend: server.Backend, processes: int = 1, rate_limit: int = 0
) -> Iterator[tuple[tuple[int, ...], int, str, Path]]:
    """``posthaste serve --role smtp`` (``processes`` of them sharing the port, as one per core
    runs): their pids, the STARTTLS port, a test key and the certificate. ``rate_limit``: the
    team's requests per second (0: none), to measure what checking it costs per message."""
    backend.data_dir.mkdir(parents=True, exist_ok=True)
    port = server.free_port()
    env = {
        **server.server_env(backend, server.free_port()),
        "POSTHASTE_ROLE": "smtp",
        "POSTHASTE_SMTP_RELAY_PORT": str(port),
        "POSTHASTE_SMTP_RELAY_TLS_PORT": "0",
    }
    args = [sys.executable, *server.SERVE]
    with contextlib.ExitStack() as stack:
        pids = [
            stack.enter_context(
                _process(args, env, backend.workdir, port, backend.workdir / "relay.log")
            )
        ]
        for index in range(1, processes):  # the first made the certificate and the schema
            log = backend.workdir / f"relay-{index}.log"
            pids.append(stack.enter_context(_process(args, env, backend.workdir, port, log, True)))
        limit = str(rate_limit)
        server._cli(env, backend.workdir, "teams", "create", "bench", "--rate-limit", limit)
        key = server._cli(
            env, backend.workdir, "keys", "create", "--team", "bench", "--mode", "test"
        )
        yield tuple(pids), port, key, backend.data_dir / "smtp-tls-cert.pem"


@contextmanager
def sink_server(cert: Path, workdir: Path, auth: bool = True) -> Iterator[tuple[int, int]]:
    port = server.free_port()
    key = cert.with_name("smtp-tls-key.pem")
    args = [sys.executable, "-m", "bench.relay", "--sink", str(port), str(cert), str(key)]
    if not auth:
        args.append("--sink-without-auth")
    env = {**os.environ, "PYTHONPATH": server.pythonpath()}
    with _process(args, env, workdir, port, workdir / "sink.log") as pid:
        yield pid, port


# --- main --------------------------------------------------------------------------------------


def _measured(target: Target, cert: Path, args: argparse.Namespace) -> Figures:
    import uvloop

    return uvloop.run(measure(target, cert, args.connections, args.warmup, args.duration))


def run_backend(name: str, args: argparse.Namespace, workdir: Path) -> list[Figures]:
    with (
        server.prepared(name, workdir / name) as backend,
        relay_server(backend, args.relays, args.rate_limit) as (pids, port, key, cert),
    ):
        label = f"{name}: relay" + (f" ({args.relays} processes)" if args.relays > 1 else "")
        label += f", rate limit {args.rate_limit}/s" if args.rate_limit else ""
        relay = Target(label, port, "posthaste", key, pids, database_url=_asyncpg_url(backend))
        figures = [_measured(relay, cert, args)]
        if not args.bare_sink:
            return figures
        with sink_server(cert, backend.workdir) as (sink_pid, sink_port):
            sink = Target(f"{name}: bare aiosmtpd sink", sink_port, "any", "any", (sink_pid,))
            figures.append(_measured(sink, cert, args))
        if args.postfix and postfix.available():
            figures.append(_postfix_figures(name, cert, args))
    return figures


def _asyncpg_url(backend: server.Backend) -> str:
    url = backend.server_database_url
    return url.replace("postgresql+asyncpg://", "postgresql://") if url else ""


def _postfix_figures(name: str, cert: Path, args: argparse.Namespace) -> Figures:
    """Postfix accepting with the same certificate, STARTTLS and AUTH, keeping what it takes."""
    tls = (cert, cert.with_name("smtp-tls-key.pem"))
    with postfix.running(server.free_port(), None, tls) as instance:
        user, password = postfix.SASL_USER, postfix.SASL_PASSWORD
        pid = instance.master_pid()
        target = Target(f"Postfix ({name} run)", instance.port, user, password, (pid,), tree=True)
        return _measured(target, cert, args)


def table(figures: list[Figures]) -> str:
    lines = [
        "| measurement | connections | messages/s | p50 ms | p99 ms | server CPU ms/message "
        "| own database CPU ms/message | CPU % (server / client / postgres / machine) | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        errors = ", ".join(f"{k}: {v}" for k, v in f.errors.items()) or "none"
        lines.append(
            f"| {f.name} | {f.connections} | {f.messages_per_s:,.0f} | {f.p50_ms} | "
            f"{f.p99_ms} | {f.server_cpu_ms_per_message} | {_database(f)} | {_cpu(f)} | {errors} |"
        )
    return "\n".join(lines)


def _database(f: Figures) -> str:
    return "-" if f.database_cpu_ms_per_message is None else str(f.database_cpu_ms_per_message)


def _cpu(f: Figures) -> str:
    parts = ("server_pct", "client_pct", "postgres_pct", "machine_pct")
    return " / ".join(f"{f.cpu.get(p, 0):.0f}" for p in parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.relay", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--relays", type=int, default=1, help="relay processes sharing the port")
    parser.add_argument(
        "--rate-limit", type=int, default=0, help="the team's rate limit (0: none), per second"
    )
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--no-postfix", dest="postfix", action="store_false", help="skip the Postfix baseline"
    )
    parser.add_argument(
        "--no-sink", dest="bare_sink", action="store_false", help="skip the bare aiosmtpd sink"
    )
    parser.add_argument("--sink", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    parser.add_argument("--sink-without-auth", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sink:
        port, cert, key = int(args.sink[0]), Path(args.sink[1]), Path(args.sink[2])
        asyncio.run(run_sink(port, cert, key, auth=not args.sink_without_auth))
        return
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    figures: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-relay-") as tmp:
        for name in backends:
            figures.extend(run_backend(name, args, Path(tmp)))
    print(table(figures))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"relay-{time.strftime('%Y%m%dT%H%M%S')}.json"
    document = [
        {**asdict(f), "server_cpu_ms_per_message": f.server_cpu_ms_per_message} for f in figures
    ]
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
