"""``python -m bench.throttle``: adaptive throttling at scale, on PostgreSQL, on loopback.

The scenario of ``tests/integration/test_destinations.py``, larger:

- a receiver that throttles as Gmail does (``tests/throttling_receiver.py``): it accepts
  ``--limit`` recipients in any sliding second, answers ``421 4.7.28`` above that, and blocks the
  sender (``550 5.7.1``) after more than three seconds' worth of 421s within ten seconds; it
  serves the MX hosts of ``gmail.test`` and ``workspace.test`` (destination ``google.com``);
- a plain sink for ``other.test`` (another destination) on the same port, another address;
- a dnslib zone on loopback for the MX lookups;
- ``--workers`` worker processes (the real ``Worker`` and ``DeliveryService``), every one with
  its own throttle, sharing one rate per destination through the database; Google's policy
  starts at ``--policy`` (above the receiver's limit, so the throttle has to find it), the
  other destination's at 2,000/s.

The emails are accepted first (``SendingService.accept_batch``), then the workers start. It
reports how long each destination took, Google's delivered rate against the limit, per second
after the first 421 (convergence), how many 421s and holds it took, whether the receiver ever
blocked, and whether any email used more than its first attempt.

``--ceiling`` first runs the same Google mail, alone, against a receiver and a policy with no
limit to speak of (1,000,000/s): what the workers deliver at all on this machine now, the bound
of any throttled figure; the throttled run then reports its rate as a fraction of both.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from sqlalchemy import func, select
from tests.dkim_keys import StaticSigningKeys, make_key
from tests.dns_server import ZoneServer
from tests.senders import AnySender
from tests.smtp_sink import Sink, running_sink
from tests.throttling_receiver import ThrottlingReceiver, running_receiver

from bench.server import SECRET_KEY, Backend, prepared, pythonpath
from posthaste.adapters.transports import build_transports
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.destinations import Policies
from posthaste.core.ids import now_ms
from posthaste.core.models import KeyMode, Origin
from posthaste.core.send_request import parse_send_request
from posthaste.storage.tables import delivery_attempts as attempts
from posthaste.storage.tables import emails, jobs

KEY = make_key("acme.test")
GMAIL_ADDRESS = "127.0.0.2"
BATCH = 100


def bench_settings(
    database_url: str, data_dir: Path, dns_port: int, policy: float, name: str
) -> Settings:
    return Settings(
        database_url=database_url,
        data_dir=data_dir,
        secret_key=SECRET_KEY,
        delivery=DeliveryTarget(kind="mx"),
        dns_nameservers=(("127.0.0.1", dns_port),),
        delivery_retry_schedule=(3600.0,),  # a 421 that used an attempt would stall its email
        destinations=Policies({"google.com": {"rate": policy}, "default": {"rate": 2000.0}}),
        mx_host=name,
        log_level="warning",
    )


def build(settings: Settings, mx_port: int) -> Services:
    return build_services(
        settings,
        senders=AnySender(settings.default_region),
        signing_keys=StaticSigningKeys(KEY),
        transports=build_transports(settings, mx_port=mx_port),
    )


async def run_worker(args: argparse.Namespace) -> None:
    settings = bench_settings(
        args.database_url, args.data_dir, args.dns_port, args.policy, args.name
    )
    services = build(settings, args.mx_port)
    worker = services.make_worker(batch_size=args.batch)
    await services.db.start_listening()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    try:
        await worker.run()
    finally:
        throttle = services.transports.by_region[settings.default_region].throttle  # type: ignore[attr-defined]
        print(
            f"{args.name}: {throttle.admitted} sessions admitted, {throttle.claims} slot claims,"
            f" {throttle.holds} holds, {getattr(throttle, 'slots', '?')} slots claimed,"
            f" {getattr(throttle, 'given_up', '?')} given up unused",
            flush=True,
        )
        await services.close()


def _spawn(
    args: argparse.Namespace,
    database_url: str,
    data_dir: Path,
    dns_port: int,
    mx_port: int,
    index: int,
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    command = [
        sys.executable,
        "-m",
        "bench.throttle",
        "worker",
        database_url,
        str(data_dir),
        str(dns_port),
        str(mx_port),
        str(args.policy),
        f"worker-{index}.test",
        str(args.batch),
    ]
    return subprocess.Popen(command, env=env)


def _zone() -> ZoneServer:
    zone = ZoneServer()
    zone.set("gmail.test", "MX", (5, "gmail-smtp-in.l.google.com"))
    zone.set("workspace.test", "MX", (1, "aspmx.l.google.com"))
    zone.set("gmail-smtp-in.l.google.com", "A", GMAIL_ADDRESS)
    zone.set("aspmx.l.google.com", "A", GMAIL_ADDRESS)
    zone.set("other.test", "MX", (10, "mx.other.test"))
    zone.set("mx.other.test", "A", "127.0.0.1")
    zone.start()
    return zone


async def _accept(services: Services, sender: Any, recipients: list[str]) -> None:
    now = now_ms()
    for start in range(0, len(recipients), BATCH):
        items = [
            parse_send_request(
                {"from": "hello@acme.test", "to": r, "subject": "Hi", "text": "Hello"}, now
            )
            for r in recipients[start : start + BATCH]
        ]
        await services.sending.accept_batch(sender, Origin.BATCH, items)


async def measure(args: argparse.Namespace, backend: Backend) -> float:
    zone = _zone()
    data_dir = backend.workdir / "data"
    data_dir.mkdir()
    settings = bench_settings(backend.server_database_url, data_dir, zone.port, args.policy, "x")
    await migrate(settings)
    google = [f"g{i}@{'gmail' if i % 2 else 'workspace'}.test" for i in range(args.google)]
    others = [f"o{i}@other.test" for i in range(args.others)]
    load_before = os.getloadavg()
    async with running_sink(Sink()) as sink:
        receiver = ThrottlingReceiver(per_second=args.limit, block_after=3 * args.limit)
        async with running_receiver(receiver, GMAIL_ADDRESS, sink.port):
            services = build(settings, sink.port)
            try:
                team = await services.teams.create_team("bench", 0, 0)
                key = await services.api_keys.create(team.id, NewApiKey("live", KeyMode.LIVE))
                principal = await services.api_keys.authenticate(key.token)
                await _accept(services, principal.sender, [*google, *others])
                print(f"accepted {len(google)} + {len(others)} emails", flush=True)
                workers = [
                    _spawn(args, backend.server_database_url, data_dir, zone.port, sink.port, i)
                    for i in range(args.workers)
                ]
                others_done: float | None = None
                google_done: float | None = None
                spawned = time.monotonic()
                while not receiver.accepted and not sink.messages:  # the workers are up
                    assert time.monotonic() - spawned < 120, "the workers did not start"
                    await asyncio.sleep(0.01)
                started = time.monotonic()
                timeline: list[tuple[int, int]] = []  # (google, other) delivered, each second
                while time.monotonic() - started < args.deadline:
                    now = time.monotonic()
                    if now - started >= len(timeline):
                        timeline.append((len(receiver.delivered), len(sink.messages)))
                    if others_done is None and len(sink.messages) >= len(others):
                        others_done = now - started
                    if google_done is None and len(receiver.delivered) >= len(google):
                        google_done = now - started
                    if google_done is not None and others_done is not None:
                        break
                    if receiver.blocked:
                        break
                    await asyncio.sleep(0.05)
                for worker in workers:
                    worker.send_signal(signal.SIGTERM)
                for worker in workers:
                    worker.wait(120)
                done = (others_done or 0.0, google_done or 0.0)
                if args.dump:
                    times = {
                        "accepted": [at - started for at in receiver.accepted],
                        "refused": [at - started for at in receiver.refused],
                    }
                    args.dump.write_text(json.dumps(times))
                await _report(args, services, receiver, sink, done, started)
                if args.timeline:
                    steps = itertools.pairwise([(0, 0), *timeline])
                    print("each second, google.com/other.test delivered:")
                    print(" ".join(f"{g1 - g0}/{o1 - o0}" for (g0, o0), (g1, o1) in steps))
            finally:
                await services.close()
    zone.stop()
    print(f"load average before {load_before}, after {os.getloadavg()}", flush=True)
    return len(receiver.delivered) / max(google_done or 0.0, 1e-9)


async def _report(
    args: argparse.Namespace,
    services: Services,
    receiver: ThrottlingReceiver,
    sink: Sink,
    done: tuple[float, float],
    started: float,
) -> None:
    others_done, google_done = done
    started_wall = time.time() - (time.monotonic() - started)
    async with services.db.read() as tx:
        most = (await tx.conn.execute(select(func.max(emails.c.attempts)))).scalar()
        held = (
            await tx.conn.execute(
                select(func.count()).select_from(attempts).where(attempts.c.host.is_(None))
            )
        ).scalar()
        sessions = (await tx.conn.execute(select(func.count()).select_from(attempts))).scalar()
        left = (await tx.conn.execute(select(jobs))).all()
        transcripts = (await tx.conn.execute(select(attempts.c.transcript))).scalars().all()
    accepted = sorted(receiver.accepted)
    per_second: dict[int, int] = {}
    for at in accepted:
        per_second[int(at - started)] = per_second.get(int(at - started), 0) + 1
    tail = [per_second.get(s, 0) for s in range(int(google_done) // 2, int(google_done))]
    if not args.google:
        tail = []
    print(f"workers {args.workers}, receiver limit {args.limit}/s, Google policy {args.policy}/s")
    print(
        f"other.test: {len(sink.messages)} delivered in {others_done:.2f} s"
        f" ({len(sink.messages) / max(others_done, 1e-9):.0f}/s)"
    )
    print(
        f"google.com: {len(receiver.delivered)} delivered in {google_done:.2f} s"
        f" ({len(receiver.delivered) / max(google_done, 1e-9):.1f}/s against {args.limit}/s)"
    )
    print(
        f"google.com per second, second half: {tail}"
        f" (mean {sum(tail) / max(len(tail), 1):.1f}/s); peak sliding second {receiver.peak}"
    )
    print(f"421 answered: {len(receiver.refused)}; blocked: {receiver.blocked}")
    print(f"attempt rows: {sessions}, of them held without a session: {held}")
    print(f"most attempts counted on any email: {most}")
    print(f"what each 421 decided: {dict(_decided(transcripts))}")
    if left:
        now = now_ms()
        print(f"jobs left: {len(left)}, e.g.:")
        for job in left[:5]:
            print(
                f"  due in {(job.available_at - now) / 1000:.1f} s, claims {job.attempts}, "
                f"holds {job.holds}, locked by {job.locked_by}: {job._mapping.get('hold_reason')}"
            )
            async with services.db.read() as tx:
                tried = select(attempts).where(attempts.c.email_id == job.ref)
                for row in (await tx.conn.execute(tried)).all():
                    print(f"    attempt {row.attempt} {row.host}: {row.replies}")
                    print(f"      {[line for line in row.transcript if 'note' in line][-4:]}")
    if args.decisions:
        for view in await services.destinations.list(recent=20):
            for reply in reversed(view.recent):
                print(f"  {view.name} {reply.at - int(started_wall * 1000)} ms: {reply.decision}")


def _decided(transcripts: list[Any]) -> collections.Counter[str]:
    """The throttle's answer to each "slow down", by kind, from the attempts' transcripts."""
    kinds: collections.Counter[str] = collections.Counter()
    for lines in transcripts:
        for line in lines or []:
            note = line.get("note", "") if isinstance(line, dict) else ""
            if note.startswith("throttle: ") and " answered " in note:
                decision = note.split("': ", 1)[-1]
                kinds[decision.split(" ", 2)[0] + " " + decision.split(" ", 2)[1]] += 1
    return kinds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.throttle", description=__doc__)
    sub = parser.add_subparsers(dest="role")
    worker = sub.add_parser("worker")
    worker.add_argument("database_url")
    worker.add_argument("data_dir", type=Path)
    worker.add_argument("dns_port", type=int)
    worker.add_argument("mx_port", type=int)
    worker.add_argument("policy", type=float)
    worker.add_argument("name")
    worker.add_argument("batch", type=int)
    parser.add_argument("--google", type=int, default=3000, help="emails to google.com")
    parser.add_argument("--others", type=int, default=2000, help="emails to other.test")
    parser.add_argument("--limit", type=int, default=100, help="the receiver's messages/s")
    parser.add_argument("--policy", type=float, default=400.0, help="Google's policy, msgs/s")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--batch", type=int, default=64, help="jobs claimed at once per worker")
    parser.add_argument("--decisions", action="store_true", help="print the last decisions")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds at most")
    parser.add_argument(
        "--ceiling", action="store_true", help="first measure the workers with no limit"
    )
    parser.add_argument(
        "--dump", type=Path, help="write the receiver's accepted and refused times (JSON)"
    )
    parser.add_argument(
        "--timeline", action="store_true", help="print each second's deliveries of both"
    )
    args = parser.parse_args(argv)
    if args.role == "worker":
        uvloop.run(run_worker(args))
        return
    ceiling = None
    if args.ceiling:
        unlimited = argparse.Namespace(
            **{**vars(args), "limit": 1_000_000, "policy": 1_000_000.0, "others": 0}
        )
        print("--- ceiling: Google's mail alone, no limit", flush=True)
        ceiling = _run(unlimited)
        print(f"--- throttled: receiver limit {args.limit}/s", flush=True)
    rate = _run(args)
    if ceiling is not None:
        print(
            f"google.com: {rate:.1f}/s = {rate / args.limit:.0%} of the limit, "
            f"{rate / ceiling:.0%} of the ceiling ({ceiling:.1f}/s)"
        )


def _run(args: argparse.Namespace) -> float:
    with (
        tempfile.TemporaryDirectory(prefix="posthaste-bench-") as workdir,
        prepared("postgres", Path(workdir)) as backend,
    ):
        return uvloop.run(measure(args, backend))


if __name__ == "__main__":
    main()
