"""``python -m bench.webhooks``: webhook deliveries per second to a loopback receiver.

The receiver is an aiohttp server in its own process that answers 200 at once (a customer's
endpoint). For each backend: N events are recorded through ``insert_events`` (the fan-out to
the endpoints happens there, in batches of 100 as the send path records them), then one
dispatcher, as ``posthaste serve`` runs it, delivers them all; the figure is deliveries / wall
time from the dispatcher's start to the last delivery recorded as delivered. Signing, the
POST, and the attempt and status writes are all included. The dispatcher and the bare client
run on uvloop, as ``posthaste serve`` does (``--asyncio``: the default loop); the receiver on
uvloop too. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web
from sqlalchemy import func, select

from bench import cpu, server
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Event
from posthaste.core.webhook_requests import parse_new_webhook
from posthaste.core.webhooks import envelope_bytes
from posthaste.storage.events import insert_events
from posthaste.storage.tables import webhook_deliveries

BATCH = 100


def _receive(port_queue: Any) -> None:
    async def ok(_request: web.BaseRequest) -> web.Response:
        await _request.read()
        return web.Response(text="ok")

    async def main() -> None:
        # aiohttp's low-level server: a customer's endpoint that does nothing but answer, with
        # no router or middleware between the request and the 200.
        runner = web.ServerRunner(web.Server(ok), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port_queue.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    _runner()(main())


def _runner() -> Callable[[Coroutine[Any, Any, Any]], Any]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


async def raw_ceiling(url: str, requests: int, concurrency: int) -> float:
    """Requests/s of a bare aiohttp client to the same receiver: the machine's ceiling now."""
    import aiohttp

    body = envelope_bytes("email.delivered", now_ms(), {"email_id": new_id()})
    slots = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            async with slots, session.post(url, data=body) as response:
                await response.read()

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        return requests / (time.perf_counter() - started)


@contextlib.asynccontextmanager
async def _dispatchers(settings: Settings, args: argparse.Namespace) -> AsyncIterator[list[int]]:
    """Start ``--dispatchers`` dispatchers, ready to go at ``args.go()``; yields their pids.

    One runs in this process (its claims and group commits are printed); more run as separate
    processes, each as a ``posthaste serve --role worker`` process would run its dispatcher.
    """
    if args.dispatchers == 1:
        services = build_services(settings)
        await services.db.start_listening()
        dispatcher = services.make_webhook_dispatcher(**_policy(args))
        tasks: list[asyncio.Task[None]] = []
        args.go = lambda: tasks.append(asyncio.create_task(dispatcher.run()))
        try:
            yield [os.getpid()]
        finally:
            dispatcher.stop()
            await asyncio.gather(*tasks)
            print(f"  claims: {dispatcher.claim_rounds}, group commits: {dispatcher.flush_rounds}")
            await dispatcher.client.close()
            await services.close()
        return
    fields = {name: getattr(settings, name) for name in _CHILD_SETTINGS}  # Settings won't pickle
    spawn = multiprocessing.get_context("spawn")
    go, stop = spawn.Event(), spawn.Event()
    ready = [spawn.Event() for _ in range(args.dispatchers)]
    children = [
        spawn.Process(target=_dispatch, args=(fields, _policy(args), flag, go, stop))
        for flag in ready
    ]
    for child in children:
        child.start()
    try:
        loop = asyncio.get_running_loop()
        for flag in ready:
            if not await loop.run_in_executor(None, flag.wait, 60):
                raise RuntimeError("a dispatcher process did not start within 60 s")
        args.go = go.set
        yield [child.pid for child in children if child.pid is not None]
    finally:
        stop.set()
        for child in children:
            child.join(30)
            if child.is_alive():
                child.terminate()


_CHILD_SETTINGS = ("database_url", "data_dir", "secret_key", "webhook_allow_private")


def _policy(args: argparse.Namespace) -> dict[str, int | float]:
    return {"per_endpoint": args.per_endpoint, "flush_interval": args.flush_ms / 1000}


def _dispatch(
    fields: dict[str, Any], policy: dict[str, int | float], ready: Any, go: Any, stop: Any
) -> None:
    """A dispatcher process: built like ``serve``'s, started at ``go``, stopped at ``stop``."""

    async def main() -> None:
        services = build_services(Settings(**fields))
        await services.db.start_listening()
        dispatcher = services.make_webhook_dispatcher(**policy)
        ready.set()
        while not go.is_set():  # noqa: ASYNC110 (a multiprocessing event)
            await asyncio.sleep(0.005)
        task = asyncio.create_task(dispatcher.run())
        while not stop.is_set():  # noqa: ASYNC110 (a multiprocessing event)
            await asyncio.sleep(0.1)
        dispatcher.stop()
        await task
        await dispatcher.client.close()
        await services.close()

    _runner()(main())


def settings_for(backend: server.Backend) -> Settings:
    url = backend.server_database_url
    return Settings(
        database_url=url,
        data_dir=backend.data_dir,
        secret_key=server.SECRET_KEY,
        webhook_allow_private=True,
    )


async def _record(services: Services, team_id: str, count: int) -> float:
    """Record ``count`` events in transactions of 100; seconds taken (fan-out included)."""
    started = time.perf_counter()
    for offset in range(0, count, BATCH):
        now = now_ms()
        items = [
            Event(new_id(), team_id, "email.delivered", new_id(), now, {"n": offset + i})
            for i in range(min(BATCH, count - offset))
        ]
        async with services.db.transaction() as tx:
            await insert_events(tx, items)
    return time.perf_counter() - started


async def _delivered(services: Services) -> int:
    query = select(func.count()).where(webhook_deliveries.c.status == "delivered")
    async with services.db.read() as tx:
        return int((await tx.conn.execute(query)).scalar_one())


async def measure(
    settings: Settings, receiver_url: str, args: argparse.Namespace
) -> dict[str, Any]:
    await migrate(settings)
    services = build_services(settings)
    await services.db.start_listening()
    try:
        team = await services.teams.create_team(f"bench-{new_id()[:8]}", 0, 0)
        created = await services.api_keys.create(team.id, NewApiKey("bench"))
        principal = await services.api_keys.authenticate(created.token)
        quiet = await _record(services, team.id, args.events)  # no endpoint yet: the base cost
        for n in range(args.endpoints):
            body = {"endpoint": f"{receiver_url}/{n}", "events": ["email.delivered"]}
            await services.webhooks.create(principal, parse_new_webhook(body))
        fanned = await _record(services, team.id, args.events)
        total = args.events * args.endpoints
        async with _dispatchers(settings, args) as dispatcher_pids:
            pids = {"dispatcher": dispatcher_pids, "receiver": [args.receiver_pid]}
            before = cpu.snapshot(pids)
            backends_before = {pid: cpu.process_seconds(pid) for pid in cpu.postgres_pids()}
            started = time.perf_counter()
            args.go()
            while await _delivered(services) < total:  # noqa: ASYNC110 (polls the database)
                await asyncio.sleep(0.25)
            elapsed = time.perf_counter() - started
            after = cpu.snapshot(pids)
            own = await cpu.database_backends_seconds(services.db, backends_before)
    finally:
        await services.close()
    return {
        "events": args.events,
        "endpoints": args.endpoints,
        "dispatchers": args.dispatchers,
        "deliveries_per_s": total / elapsed,
        "cpu_ms": {
            label: 1000 * (after.processes[label] - before.processes[label]) / total
            for label in ("dispatcher", "receiver", "postgres")
        }
        | {"own_backends": 1000 * own / total},
        "record_events_per_s_without_webhooks": args.events / quiet,
        "record_events_per_s_with_webhooks": args.events / fanned,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.webhooks", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--endpoints", type=int, default=1)
    parser.add_argument("--per-endpoint", type=int, default=32, help="concurrent requests each")
    parser.add_argument(
        "--flush-ms", type=float, default=20, help="the dispatchers' group-commit interval"
    )
    parser.add_argument(
        "--dispatchers",
        type=int,
        default=1,
        help="dispatcher processes sharing the queue (1: in the bench process)",
    )
    parser.add_argument(
        "--asyncio",
        action="store_true",
        help="run the dispatcher on asyncio's default loop (serve, and this bench, use uvloop)",
    )
    args = parser.parse_args(argv)
    ports: Any = multiprocessing.get_context("spawn").Queue()
    receiver = multiprocessing.get_context("spawn").Process(target=_receive, args=(ports,))
    receiver.start()
    args.receiver_pid = receiver.pid
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=30)}/hook"
        run = asyncio.run if args.asyncio else _runner()  # uvloop: as serve runs
        ceiling = run(raw_ceiling(url, args.events, args.per_endpoint))
        print(f"bare aiohttp client, {args.per_endpoint} concurrent: {ceiling:,.0f} requests/s\n")
        backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
        print(
            "| backend | events x endpoints | dispatchers | deliveries/s "
            "| CPU ms per delivery: dispatcher / receiver / postgres (whole box) "
            "| its own backends |"
        )
        print("|---|---|---|---|---|---|")
        for name in backends:
            with tempfile.TemporaryDirectory() as tmp, server.prepared(name, Path(tmp)) as backend:
                row = run(measure(settings_for(backend), url, args))
            ms = row["cpu_ms"]
            print(
                f"| {name} | {row['events']:,} x {row['endpoints']} | {row['dispatchers']} "
                f"| {row['deliveries_per_s']:,.0f} "
                f"| {ms['dispatcher']:.3f} / {ms['receiver']:.3f} / {ms['postgres']:.3f} "
                f"| {ms['own_backends']:.3f} |",
                flush=True,
            )
            print(
                f"  events recorded/s: {row['record_events_per_s_without_webhooks']:,.0f} "
                f"without webhooks, {row['record_events_per_s_with_webhooks']:,.0f} with",
                flush=True,
            )
    finally:
        receiver.terminate()
        receiver.join()


if __name__ == "__main__":
    main()
