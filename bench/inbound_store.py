"""``python -m bench.inbound_store``: the CPU it costs to store received mail on SQLite, per
message and per group, away from SMTP, TLS and parsing.

The inbound server stores the messages of concurrent connections together (``GroupCommit``):
one write transaction per group. This stores ``--messages`` already-parsed copies of the
inbound benchmark's message (``bench.inbound``: the relay's 2 KB text+html message, a new
recipient each) in groups of each ``--groups`` size, one group after the other, through
``InboundService``'s own group step (records, recipients, raw message, ``email.received`` and
its webhook fan-out, committed). For each size: the process's CPU per message (every thread:
the event loop's and the SQLite connections'), the event loop thread's alone (the one that
bounds the server: SQLite's own work runs on its connection's thread, beside it), and the wall
time. A steadier figure than the SMTP benchmark's on a loaded box: no client, no network.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import uvloop

from bench.relay import sample_message
from bench.server import SECRET_KEY
from posthaste.bootstrap import build_services, migrate
from posthaste.config import Settings
from posthaste.core.events import EventType
from posthaste.core.ids import new_id
from posthaste.core.inbound import Arrival, read_inbound
from posthaste.core.mail_auth import Authentication, results_field
from posthaste.core.models import Event
from posthaste.services import inbound
from posthaste.storage.inbound import RECEIVED, Stored

WARMUP_GROUPS = 20


def stored_copy(team_id: str, number: int, template: bytes) -> Stored:
    """What ``InboundService`` hands its group step for one message (as ``_store_received``)."""
    recipient = f"r{number}@acme.test"
    raw = template.replace(b"{rcpt}", recipient.encode())
    arrival = Arrival("sender@sender.bench", [], raw, "127.0.0.1", "bench")
    kept = inbound.Kept(results_field("mx.bench", Authentication()), raw)
    parsed = read_inbound(raw, arrival.mail_from, kept.results)
    item = inbound._record(
        team_id, RECEIVED, None, arrival, parsed, kept, Authentication(), [recipient]
    )
    addresses = list(dict.fromkeys([*parsed.addresses, recipient]))
    data = inbound.received_event_data(item)
    event = Event(new_id(), team_id, EventType.EMAIL_RECEIVED, None, item.created_at, data)
    return Stored(item, kept.parts, addresses, [event])


async def measure(messages: int, size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="posthaste-inbound-store-") as tmp:
        settings = Settings(
            database_url=f"sqlite:///{tmp}/posthaste.db", data_dir=Path(tmp), secret_key=SECRET_KEY
        )
        await migrate(settings)
        services = build_services(settings)
        try:
            team = await services.teams.create_team("bench")
            template = sample_message("{rcpt}")
            groups = max(1, messages // size)
            copies = [
                stored_copy(team.id, n, template) for n in range((groups + WARMUP_GROUPS) * size)
            ]
            batches = [copies[n : n + size] for n in range(0, len(copies), size)]
            for batch in batches[:WARMUP_GROUPS]:
                await services.inbound._store_many(batch)
            cpu, loop, wall = time.process_time(), time.thread_time(), time.perf_counter()
            for batch in batches[WARMUP_GROUPS:]:
                await services.inbound._store_many(batch)
            cpu, loop = time.process_time() - cpu, time.thread_time() - loop
            wall = time.perf_counter() - wall
        finally:
            await services.close()
    count = groups * size
    return {
        "group": size,
        "cpu_ms": 1000 * cpu / count,
        "loop_ms": 1000 * loop / count,
        "wall_ms": 1000 * wall / count,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inbound_store", description=__doc__)
    parser.add_argument("--messages", type=int, default=3200, help="per group size")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 4, 16, 64])
    args = parser.parse_args(argv)
    print("| group | CPU ms/message | event loop thread ms/message | wall ms/message |")
    print("|---:|---:|---:|---:|")
    for size in args.groups:
        row = uvloop.run(measure(args.messages, size))
        print(
            f"| {size} | {row['cpu_ms']:.3f} | {row['loop_ms']:.3f} | {row['wall_ms']:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
