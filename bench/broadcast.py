"""``python -m bench.broadcast``: a broadcast to a large segment, expanded on PostgreSQL.

One process builds the real services (``build_services``) on a fresh PostgreSQL database, seeds
``--members`` contacts in one segment (bulk inserts, not measured), then:

1. **broadcast**: creates the broadcast and sends it (``BroadcastService``, live key), and runs
   a ``Worker`` that handles only ``expand_broadcast`` jobs until the broadcast is ``sent``:
   recipients accepted into the queue per second (every member's email rendered, checked
   through the send path and stored with its delivery job, the cursor kept per chunk), and the
   process's resident memory before and at its peak (sampled every 100 ms from
   ``/proc/self/status``); ``--in-flight`` sets how many chunks the job stores at once;
2. **baseline**, in the same run and database: the same number of emails through
   ``SendingService.accept_batch`` in batches of 100, 8 batches in flight (what
   ``POST /emails/batch`` does after parsing, without HTTP).

Nothing is delivered (no delivery worker runs): the figure is the rate at which a broadcast
fills the queue. Run it on an idle machine; other load on the box shows in the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvloop
from sqlalchemy import insert
from tests.senders import AnySender

from bench.serve import _database_cpu
from bench.server import SECRET_KEY, Backend, prepared
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.broadcasts import BroadcastContent, BroadcastStatus, SendOrder
from posthaste.core.ids import new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import KeyMode, Origin, Principal
from posthaste.core.send_request import parse_send_request
from posthaste.storage.tables import contacts, segment_members
from posthaste.workers.runner import Worker

BATCH = 100
SEED_ROWS = 5000
HTML = (
    "<p>Hello {{contact.first_name}},</p><p>Your plan: {{contact.properties.plan}}.</p>"
    "<p>News of the week, in a few paragraphs of text. </p>"
    * 4
    + "<p><a href='{{unsubscribe_url}}'>Unsubscribe</a></p>"
)


@contextlib.asynccontextmanager
async def cpu_seconds(url: str) -> AsyncIterator[dict[str, float]]:
    """CPU seconds over the block: this process's, and its database's own backends'."""
    spent: dict[str, float] = {}
    ours = time.process_time()
    database = await _database_cpu(url)
    yield spent
    after = await _database_cpu(url)
    spent["process_cpu_s"] = round(time.process_time() - ours, 2)
    spent["database_cpu_s"] = round(sum(t - database.get(pid, 0.0) for pid, t in after.items()), 2)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def principal_of(services: Services, name: str) -> Principal:
    team = await services.teams.create_team(name, 0, 0)
    key = await services.api_keys.create(team.id, NewApiKey(name, KeyMode.LIVE))
    return await services.api_keys.authenticate(key.token)


async def seed(services: Services, principal: Principal, members: int) -> str:
    """``members`` contacts of the team, all in one new segment; the segment's id."""
    segment = await services.segments.create(principal, "Everyone")
    now = now_ms()
    for start in range(0, members, SEED_ROWS):
        ids = [new_id() for _ in range(min(SEED_ROWS, members - start))]
        rows = [
            {
                "id": contact_id,
                "team_id": principal.team_id,
                "email": f"reader{start + n}@example.com",
                "email_key": f"reader{start + n}@example.com",
                "first_name": f"Reader{n}",
                "last_name": None,
                "unsubscribed": False,
                "properties": {"plan": "pro"},
                "created_at": now,
                "updated_at": now,
            }
            for n, contact_id in enumerate(ids)
        ]
        memberships = [
            {
                "segment_id": segment.id,
                "contact_id": contact_id,
                "team_id": principal.team_id,
                "created_at": now,
            }
            for contact_id in ids
        ]
        async with services.db.transaction() as tx:
            await tx.conn.execute(insert(contacts), rows)
            await tx.conn.execute(insert(segment_members), memberships)
    return segment.id


async def broadcast(
    services: Services, principal: Principal, segment_id: str, url: str
) -> dict[str, Any]:
    content = BroadcastContent(
        segment_id=segment_id, from_="News <news@acme.test>",
        subject="Hello {{contact.first_name}}", html=HTML,
    )  # fmt: skip
    worker = Worker(
        services.db,
        {JobKind.EXPAND_BROADCAST: services.broadcasts.expand},
        lease_seconds=60,
    )
    before = peak = rss_kib()
    async with cpu_seconds(url) as spent:
        started = time.perf_counter()
        created = await services.broadcasts.create(principal, content, SendOrder(None))
        running = asyncio.create_task(worker.run())
        while True:
            await asyncio.sleep(0.1)
            peak = max(peak, rss_kib())
            current = await services.broadcasts.get(principal, created.id)
            if current.status is not BroadcastStatus.SENDING:
                break
        elapsed = time.perf_counter() - started
    worker.stop()
    await running
    counts = current.counts
    return {
        "status": current.status.value,
        "recipients": counts.recipients,
        "sent": counts.sent,
        "seconds": round(elapsed, 2),
        "recipients_per_second": round(counts.sent / elapsed),
        "rss_before_mib": round(before / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "rss_growth_mib": round((peak - before) / 1024, 1),
        **spent,
    }


async def baseline(
    services: Services, principal: Principal, count: int, url: str
) -> dict[str, Any]:
    bodies = [
        {
            "from": "News <news@acme.test>",
            "to": f"base{n}@example.com",
            "subject": "Hello",
            "html": HTML.replace("{{", "").replace("}}", ""),
        }
        for n in range(BATCH)
    ]

    async def acceptor(batches: int) -> None:
        for _ in range(batches):
            now = now_ms()
            requests = [parse_send_request(body, now) for body in bodies]
            await services.sending.accept_batch(principal.sender, Origin.BATCH, requests)

    acceptors = 8
    batches = count // BATCH // acceptors
    async with cpu_seconds(url) as spent:
        started = time.perf_counter()
        await asyncio.gather(*(acceptor(batches) for _ in range(acceptors)))
        elapsed = time.perf_counter() - started
    total = batches * acceptors * BATCH
    return {
        "emails": total,
        "seconds": round(elapsed, 2),
        "per_second": round(total / elapsed),
        **spent,
    }


async def measure(args: argparse.Namespace, backend: Backend) -> dict[str, Any]:
    settings = Settings(
        database_url=backend.server_database_url,
        data_dir=backend.data_dir,
        secret_key=SECRET_KEY,
        log_level="warning",
    )
    await migrate(settings)
    services = build_services(settings, senders=AnySender(settings.default_region))
    if args.in_flight:
        services.broadcasts.in_flight = args.in_flight
    await services.db.start_listening()
    try:
        sender = await principal_of(services, "broadcaster")
        segment_id = await seed(services, sender, args.members)
        in_flight = getattr(services.broadcasts, "in_flight", 1)  # 1 before it was a setting
        result: dict[str, Any] = {"members": args.members, "in_flight": in_flight}
        url = backend.server_database_url
        result["broadcast"] = await broadcast(services, sender, segment_id, url)
        batcher = await principal_of(services, "batcher")
        result["baseline_accept_batch"] = await baseline(services, batcher, args.members, url)
        return result
    finally:
        await services.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--in-flight", type=int, help="chunks stored at once (default: ours)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, prepared("postgres", Path(workdir)) as backend:
        result = uvloop.run(measure(args, backend))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
