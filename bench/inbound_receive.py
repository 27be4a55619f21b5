"""``python -m bench.inbound_receive``: the CPU it costs to take in one received message on
SQLite once its DATA is read, away from SMTP and TLS: what the inbound server's DATA handler
does before its 250.

``--connections`` tasks (16, as ``bench.inbound``'s connections) each hand
``InboundService.receive`` the inbound benchmark's message (``bench.inbound``: the relay's
2 KB text+html message, a new recipient at a receiving domain each) one after another, as the
server's sessions do: read (parsed into the received-email record), its ``email.received``
event and webhook fan-out built, and stored with the messages of the other tasks
(``GroupCommit``), committed. Authentication is left out (``NoAuthentication``: SPF, DKIM and
DMARC need the DNS server ``bench.inbound`` runs). Printed: the process's CPU per message
(every thread: the event loop's and the SQLite connection's) and the event loop thread's
alone, the one that bounds the server. A steadier figure than the SMTP benchmark's on a loaded
box: no client, no network; ``PYTHONPATH=<another checkout>/src:.`` measures another tree.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path

import uvloop

from bench.relay import sample_message
from bench.server import SECRET_KEY
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.core.inbound import Arrival, Mailbox
from posthaste.services.inbound import NoAuthentication

WARMUP_PER_CONNECTION = 50


async def _received(services: Services, team_id: str, count: int, connections: int) -> None:
    template = sample_message("{rcpt}")
    numbers = itertools.count()

    async def connection(messages: int) -> None:
        for _ in range(messages):
            recipient = f"r{next(numbers)}@acme.test"
            raw = template.replace(b"{rcpt}", recipient.encode())
            mailbox = Mailbox(team_id, recipient)
            arrival = Arrival("sender@sender.bench", [mailbox], raw, "127.0.0.1", "bench")
            await services.inbound.receive(arrival)

    await asyncio.gather(*(connection(count // connections) for _ in range(connections)))


async def measure(messages: int, connections: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="posthaste-inbound-receive-") as tmp:
        settings = Settings(
            database_url=f"sqlite:///{tmp}/posthaste.db", data_dir=Path(tmp), secret_key=SECRET_KEY
        )
        await migrate(settings)
        services = build_services(settings)
        try:
            services.inbound.authenticator = NoAuthentication()
            team = await services.teams.create_team("bench")
            warmup = WARMUP_PER_CONNECTION * connections
            await _received(services, team.id, warmup, connections)
            cpu, loop, wall = time.process_time(), time.thread_time(), time.perf_counter()
            await _received(services, team.id, messages, connections)
            cpu, loop = time.process_time() - cpu, time.thread_time() - loop
            wall = time.perf_counter() - wall
        finally:
            await services.close()
    count = messages // connections * connections
    return {
        "cpu_ms": 1000 * cpu / count,
        "loop_ms": 1000 * loop / count,
        "wall_ms": 1000 * wall / count,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inbound_receive", description=__doc__)
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    print("| run | CPU ms/message | event loop thread ms/message | wall ms/message |")
    print("|---:|---:|---:|---:|")
    for run in range(1, args.runs + 1):
        row = uvloop.run(measure(args.messages, args.connections))
        print(
            f"| {run} | {row['cpu_ms']:.3f} | {row['loop_ms']:.3f} | {row['wall_ms']:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
