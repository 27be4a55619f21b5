"""CPU per accepted email, client and database apart: ``python -m bench.accept_cost``.

What ``POST /emails/batch`` does after HTTP (the body's JSON read, each item parsed, one
``SendingService.accept_batch``) for ``--emails`` emails in batches of 100, ``--in-flight`` at
once, on a fresh database; then what ``POST /emails`` does for ``--singles`` emails, 32 at once.
The figures are CPU seconds per email of this process and of the database's own backends
(PostgreSQL), which a busy machine slows but does not inflate as it does rates. To measure
another tree, put its ``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop
from tests.senders import AnySender

from bench import payload
from bench.broadcast import cpu_seconds, principal_of
from bench.server import SECRET_KEY, prepared
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.core.ids import now_ms
from posthaste.core.models import Origin, Principal
from posthaste.core.send_request import parse_send_request
from posthaste.errors import PosthasteError
from posthaste.server import settle_heap

BATCH = 100


def _items(body: bytes, now: int) -> list[Any]:
    items: list[Any] = []
    for item in orjson.loads(body):
        try:
            items.append(parse_send_request(item, now))
        except PosthasteError as exc:
            items.append(exc)
    return items


async def batches(
    services: Services, who: Principal, emails: int, in_flight: int, url: str
) -> dict[str, Any]:
    bodies = payload.batch_bodies(BATCH)
    rounds = max(1, emails // BATCH // in_flight)

    async def acceptor(first: int) -> None:
        for n in range(rounds):
            items = _items(bodies[(first + n) % len(bodies)], now_ms())
            outcomes = await services.sending.accept_batch(who.sender, Origin.BATCH, items)
            assert not any(isinstance(o, PosthasteError) for o in outcomes), outcomes[:1]

    await acceptor(0)  # warm: statements prepared, caches filled
    async with cpu_seconds(url) as spent:
        started = time.perf_counter()
        await asyncio.gather(*(acceptor(i * rounds) for i in range(in_flight)))
        elapsed = time.perf_counter() - started
    return _figures(rounds * in_flight * BATCH, elapsed, spent)


async def singles(services: Services, who: Principal, emails: int, url: str) -> dict[str, Any]:
    bodies = payload.single_bodies()
    clients = 32
    rounds = max(1, emails // clients)

    async def client(first: int) -> None:
        for n in range(rounds):
            request = parse_send_request(orjson.loads(bodies[(first + n) % len(bodies)]), now_ms())
            await services.sending.accept(who.sender, Origin.API, request)

    await client(0)
    async with cpu_seconds(url) as spent:
        started = time.perf_counter()
        await asyncio.gather(*(client(i * rounds) for i in range(clients)))
        elapsed = time.perf_counter() - started
    return _figures(rounds * clients, elapsed, spent)


async def lone(services: Services, who: Principal, emails: int, url: str) -> dict[str, Any]:
    bodies = payload.single_bodies()

    async def send(n: int) -> None:
        request = parse_send_request(orjson.loads(bodies[n % len(bodies)]), now_ms())
        await services.sending.accept(who.sender, Origin.API, request)

    for n in range(32):
        await send(n)
    async with cpu_seconds(url) as spent:
        started = time.perf_counter()
        for n in range(emails):
            await send(n)
        elapsed = time.perf_counter() - started
    return _figures(emails, elapsed, spent)


def _figures(emails: int, elapsed: float, spent: dict[str, float]) -> dict[str, Any]:
    per = 1e6 / emails
    return {
        "emails": emails,
        "per_second": round(emails / elapsed),
        "process_us_per_email": round(spent["process_cpu_s"] * per, 1),
        "database_us_per_email": round(spent["database_cpu_s"] * per, 1),
    }


async def measure(args: argparse.Namespace, database_url: str, data_dir: Path) -> dict[str, Any]:
    settings = Settings(
        database_url=database_url, data_dir=data_dir, secret_key=SECRET_KEY, log_level="warning"
    )
    await migrate(settings)
    services = build_services(settings, senders=AnySender(settings.default_region))
    settle_heap()  # as ``posthaste serve`` does once started: the collector as in production
    try:
        who = await principal_of(services, "batcher")
        result = {}
        if args.emails:
            result["batch"] = await batches(
                services, who, args.emails, args.in_flight, database_url
            )
        if args.lone:
            result["lone"] = await lone(services, who, args.lone, database_url)
        if args.singles:
            result["single"] = await singles(services, who, args.singles, database_url)
        return result
    finally:
        await services.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--emails", type=int, default=20_000, help="batch emails (0: none)")
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--singles", type=int, default=0, help="single sends after (0: none)")
    parser.add_argument("--lone", type=int, default=0, help="lone sends, one at a time (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, prepared(args.backend, Path(workdir)) as backend:
        result = uvloop.run(measure(args, backend.server_database_url, backend.data_dir))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
