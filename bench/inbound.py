"""``python -m bench.inbound``: ``posthaste serve`` as a user starts it, taking mail as an MX,
beside Postfix's ``smtpd`` taking the same messages into a mailbox, in the same run.

For each backend: ``posthaste serve`` started as ``bench.serve`` starts it (its defaults, the
inbound port set), ``acme.test`` added through the API with receiving on, its records (MX
included) published in a loopback DNS server and verified; then ``--messages`` small messages
(about 2 KB, text and html, a new recipient at ``acme.test`` each) over ``--connections`` (16)
SMTP connections, each doing STARTTLS once and then sending back to back, as MX traffic comes.
A 250 from Posthaste means stored (parsed, its raw kept, its authentication checked, its
``email.received`` event written). ``--warmup`` messages go first, untimed.

Each message is also sent DKIM-signed (``--signed``, on by default): signed by a sender domain
whose key and DMARC record are in the DNS server, so the server verifies the signature and
looks both up, as it does for real mail; the unsigned row is the comparison with Postfix, which
checks no signature.

Baselines in the same run: a bare aiosmtpd server with the same certificate whose DATA answers
250 at once (what aiosmtpd and TLS cost in Python), and Postfix where installed
(``bench/postfix.py``): its ``smtpd`` with the same certificate and STARTTLS, its ``virtual``
agent delivering every message into one Maildir (queued and synced to disk, then delivered and
synced again). Postfix's figure is its acceptance (the 250s), and separately until the Maildir
holds every message. CPU: the server's process tree, Postfix's (``master`` and every daemon it
ran), the load generator (this process, the DNS server's thread included), PostgreSQL, the box;
and the load average. Prints a markdown table and writes ``bench/results/inbound-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import dkim
import uvloop
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from tests.dns_server import ZoneServer

from bench import cpu, postfix, relay, serve, server, sink

RESULTS = Path(__file__).resolve().parent / "results"
DOMAIN = serve.DOMAIN
SENDER_DOMAIN = "sender.bench"
SELECTOR = "s1"


@dataclass
class Figures:
    name: str
    messages: int
    seconds: float
    per_s: float
    errors: dict[str, int] = field(default_factory=dict)
    server_cpu_ms: float = 0.0  # per message
    cpu_pct: dict[str, float] = field(default_factory=dict)  # server, client, postgres, machine
    delivered_per_s: float | None = None  # Postfix: until the Maildir has them all
    delivered_cpu_ms: float | None = None


# --- the messages -----------------------------------------------------------------------------


def unsigned_message() -> sink.Message:
    template = relay.sample_message("{rcpt}")
    return lambda rcpt: template.replace(b"{rcpt}", rcpt.encode())


def signed_message(zone: ZoneServer) -> sink.Message:
    """The sample message from ``SENDER_DOMAIN``, DKIM-signed once (relaxed/relaxed, ``To``
    left out of the signed fields, so that each recipient's copy verifies), with the key and a
    DMARC record published in ``zone``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    zone.add(
        f"{SELECTOR}._domainkey.{SENDER_DOMAIN}",
        "TXT",
        "v=DKIM1; k=rsa; p=" + base64.b64encode(public).decode(),
    )
    zone.add(f"_dmarc.{SENDER_DOMAIN}", "TXT", "v=DMARC1; p=reject")
    raw = relay.sample_message("{rcpt}").replace(
        b"hello@acme.test", f"hello@{SENDER_DOMAIN}".encode()
    )
    signature = dkim.sign(
        raw,
        SELECTOR.encode(),
        SENDER_DOMAIN.encode(),
        private,
        canonicalize=(b"relaxed", b"relaxed"),
        include_headers=[b"from", b"subject", b"mime-version", b"content-type"],
    )
    template = signature + raw
    return lambda rcpt: template.replace(b"{rcpt}", rcpt.encode())


# --- one measurement --------------------------------------------------------------------------


async def _submitted(
    port: int, count: int, connections: int, message: sink.Message, context: ssl.SSLContext
) -> tuple[int, Counter[str], float]:
    started = time.perf_counter()
    accepted, refused = await sink.submit(port, count, connections, message, context, None, DOMAIN)
    return accepted, refused, time.perf_counter() - started


async def measured(
    name: str,
    port: int,
    cert: Path,
    message: sink.Message,
    args: argparse.Namespace,
    server_cpu: tuple[dict[str, list[int]], dict[str, int]],
) -> Figures:
    """``args.warmup`` messages untimed, then ``args.messages`` timed; ``server_cpu``: the
    server's processes (``{"server": [pid]}``) or process tree (``{"server": pid}``)."""
    context = ssl.create_default_context(cafile=str(cert))
    if args.warmup:
        await _submitted(port, args.warmup, args.connections, message, context)
    before = cpu.snapshot(*server_cpu)
    client_before = time.process_time()
    accepted, refused, seconds = await _submitted(
        port, args.messages, args.connections, message, context
    )
    client = time.process_time() - client_before
    after = cpu.snapshot(*server_cpu)
    return _figures(name, accepted, refused, seconds, (before, after), client)


def _figures(
    name: str,
    accepted: int,
    refused: Counter[str],
    seconds: float,
    cpu_times: tuple[cpu.CpuSnapshot, cpu.CpuSnapshot],
    client: float,
) -> Figures:
    before, after = cpu_times
    shares = cpu.usage(before, after)
    server_seconds = after.processes["server"] - before.processes["server"]
    return Figures(
        name,
        accepted,
        round(seconds, 3),
        round(accepted / seconds, 1),
        dict(refused),
        round(1000 * server_seconds / max(accepted, 1), 3),
        {
            **{k: shares[f"{k}_pct"] for k in ("server", "postgres", "machine")},
            "client": round(100 * client / seconds, 1),
        },
    )


async def _until_delivered(instance: postfix.Postfix, before: int, count: int) -> float:
    deadline = time.monotonic() + 300
    while instance.delivered() - before < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Postfix delivered {instance.delivered() - before} of {count}")
        await asyncio.sleep(0.05)
    return time.perf_counter()


# --- the three servers ------------------------------------------------------------------------


async def posthaste_rows(run: serve.Run, args: argparse.Namespace) -> list[Figures]:
    await serve.set_up(run, receiving=True)
    rows: list[Figures] = []
    messages = [("unsigned", unsigned_message())]
    if args.signed:
        messages.append(("DKIM-signed", signed_message(run.zone)))
    for label, message in messages:
        print(f"  posthaste serve, {label} ...", flush=True)
        port, cert = run.serve.inbound_port, run.serve.cert
        tree = ({}, {"server": run.serve.pid})
        rows.append(await measured(f"posthaste serve, {label}", port, cert, message, args, tree))
    return rows


def bare_row(cert: Path, workdir: Path, args: argparse.Namespace) -> Figures:
    print("  bare aiosmtpd ...", flush=True)
    with relay.sink_server(cert, workdir, auth=False) as (pid, port):
        name = "bare aiosmtpd (DATA answers 250)"
        process: tuple[dict[str, list[int]], dict[str, int]] = ({"server": [pid]}, {})
        return uvloop.run(measured(name, port, cert, unsigned_message(), args, process))


def postfix_row(cert: Path, args: argparse.Namespace) -> Figures:
    print("  Postfix ...", flush=True)
    tls = (cert, cert.with_name("smtp-tls-key.pem"))
    with postfix.running(server.free_port(), None, tls, mailboxes=DOMAIN) as instance:
        return uvloop.run(_postfix_measured(instance, cert, args))


async def _postfix_measured(
    instance: postfix.Postfix, cert: Path, args: argparse.Namespace
) -> Figures:
    context = ssl.create_default_context(cafile=str(cert))
    message = unsigned_message()
    if args.warmup:
        await _submitted(instance.port, args.warmup, args.connections, message, context)
        await _until_delivered(instance, 0, args.warmup)
    tree: dict[str, int] = {"server": instance.master_pid()}
    kept_before = instance.delivered()
    before = cpu.snapshot({}, tree)
    client_before = time.process_time()
    accepted, refused, seconds = await _submitted(
        instance.port, args.messages, args.connections, message, context
    )
    accepted_at = cpu.snapshot({}, tree)
    client = time.process_time() - client_before
    done = await _until_delivered(instance, kept_before, accepted)
    after = cpu.snapshot({}, tree)
    name = "Postfix smtpd → virtual (Maildir)"
    figures = _figures(name, accepted, refused, seconds, (before, accepted_at), client)
    figures.delivered_per_s = round(accepted / (done - before.wall), 1)
    seconds_used = after.processes["server"] - before.processes["server"]
    figures.delivered_cpu_ms = round(1000 * seconds_used / max(accepted, 1), 3)
    return figures


def run_backend(name: str, args: argparse.Namespace, workdir: Path) -> list[Figures]:
    print(f"[{name}] starting posthaste serve ...", flush=True)
    with serve.serving(name, workdir / name) as (around, started):
        rows = uvloop.run(_posthaste(started, around.sink_port, around.sink_pid, around.zone, args))
        cert = started.cert
        if args.baselines:
            rows.append(bare_row(cert, around.backend.workdir, args))
            if postfix.available():
                rows.append(postfix_row(cert, args))
    return rows


async def _posthaste(
    started: serve.Serve, sink_port: int, sink_pid: int, zone: ZoneServer, args: argparse.Namespace
) -> list[Figures]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = serve.Run(started, sink_port, sink_pid, zone, http)
        return await posthaste_rows(run, args)


# --- the report -------------------------------------------------------------------------------


def table(backend: str, figures: list[Figures]) -> str:
    postfix_rate = next((f.per_s for f in figures if f.name.startswith("Postfix")), None)
    rows = [
        f"### {backend}",
        "",
        "| server | messages | accepted/s | ratio to Postfix | server CPU ms/message | "
        "CPU % server / load generator / postgres / box | delivered/s (CPU ms/message) | "
        "errors |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for f in figures:
        ratio = f"{f.per_s / postfix_rate:.2f}x" if postfix_rate else "-"
        shares = f.cpu_pct
        usage = " / ".join(
            f"{shares.get(k, 0):.0f}" for k in ("server", "client", "postgres", "machine")
        )
        delivered = (
            f"{f.delivered_per_s:,.0f} ({f.delivered_cpu_ms:.2f})" if f.delivered_per_s else ""
        )
        errors = ", ".join(f"{k}: {v}" for k, v in f.errors.items()) or "none"
        rows.append(
            f"| {f.name} | {f.messages:,} | {f.per_s:,.0f} | {ratio} | {f.server_cpu_ms:.2f} | "
            f"{usage} | {delivered} | {errors} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inbound", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--messages", type=int, default=10_000, help="timed, per row")
    parser.add_argument("--warmup", type=int, default=500, help="untimed, before each row")
    parser.add_argument(
        "--no-signed", dest="signed", action="store_false", help="skip the DKIM-signed row"
    )
    parser.add_argument(
        "--no-baselines",
        dest="baselines",
        action="store_false",
        help="skip the bare aiosmtpd and Postfix rows",
    )
    args = parser.parse_args(argv)
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    document: dict[str, Any] = {
        "settings": vars(args),
        "load_average_before": os.getloadavg(),
        "backends": {},
    }
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-inbound-") as tmp:
        for name in backends:
            figures = run_backend(name, args, Path(tmp))
            document["backends"][name] = [asdict(f) for f in figures]
            print("\n" + table(name, figures) + "\n", flush=True)
    document["load_average_after"] = os.getloadavg()
    print(
        "load average before / after: "
        f"{document['load_average_before'][0]:.1f} / {document['load_average_after'][0]:.1f}"
    )
    if not postfix.available():
        print("Postfix is not installed here: its baseline is not measured.")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"inbound-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
