"""``posthaste serve``: the API, the SMTP relay and the workers in one process, or one role."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from pathlib import Path

import uvicorn

from posthaste.api.app import create_app
from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.services.api_keys import CreatedKey
from posthaste.smtp.relay import RelayServer
from posthaste.workers.runner import Worker

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_SECONDS = 10
GC_THRESHOLD = 20_000  # allocations between young collections (Python's default: 700)


class Roles:
    """The parts this process runs, started together and stopped gracefully together."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.worker: Worker | None = None
        self.api: uvicorn.Server | None = None
        self.relay: RelayServer | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        role = self.services.settings.role
        if role in ("worker", "all"):
            self.worker = self.services.make_worker()
            self.tasks.append(asyncio.create_task(self.worker.run(), name="worker"))
            dispatcher = self.services.make_webhook_dispatcher()
            self.tasks.append(asyncio.create_task(dispatcher.run(), name="webhooks"))
        if role in ("api", "all"):
            self.api = _api_server(self.services)
            self.tasks.append(asyncio.create_task(self.api.serve(), name="api"))
        if role in ("smtp", "all"):
            self.relay = RelayServer.from_settings(self.services)
            if self.relay.listeners:
                self.tasks.append(asyncio.create_task(self.relay.run(), name="smtp-relay"))
            elif role == "smtp":
                log.warning("the smtp role has nothing to run: both relay ports are 0 (off)")

    async def stop(self) -> None:
        if self.api is not None:
            self.api.should_exit = True
        if self.worker is not None:
            self.worker.stop()
        if self.relay is not None:
            self.relay.stop()
        for dispatcher in self.services.dispatchers:
            dispatcher.stop()
        if self.tasks:
            _, pending = await asyncio.wait(self.tasks, timeout=SHUTDOWN_GRACE_SECONDS)
            for task in pending:
                task.cancel()


async def serve(settings: Settings) -> None:
    await migrate(settings)
    services = build_services(settings)
    roles = Roles(services)
    try:
        await _announce_bootstrap(services)
        roles.start()
        await services.db.start_listening()
        settle_heap()
        await _until_stopped(roles.tasks)
    finally:
        await roles.stop()
        await services.close()


def settle_heap() -> None:
    """Keep the garbage collector off what was built at start, and let it run less often.

    Everything imported and built so far (modules, the app, SQLAlchemy's tables, caches) lives
    as long as the process: ``gc.freeze()`` moves it out of the collector's reach, so a full
    collection no longer walks it. A request allocates many short-lived containers; a higher
    first threshold collects them in fewer, larger passes. Measured on the batch send path
    (bench/README.md): about a quarter more emails per CPU second.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 20)


async def _until_stopped(tasks: list[asyncio.Task[None]]) -> None:
    """Until SIGINT/SIGTERM, or until a role ends by itself (e.g. the port is taken)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _api_server(services: Services) -> uvicorn.Server:
    settings = services.settings
    config = uvicorn.Config(
        create_app(services),
        host=settings.http_host,
        port=settings.http_port,
        loop="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        # Open event streams never end by themselves: close them, rather than wait out the grace.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS // 2,
    )
    server = uvicorn.Server(config)
    log.info("API listening on http://%s:%s", settings.http_host, settings.http_port)
    return server


async def _announce_bootstrap(services: Services) -> None:
    keys = await services.teams.bootstrap()
    if not keys:
        return
    path = write_bootstrap_keys(services.settings.data_dir, keys)
    print(
        "Created team 'default' (no rate limit or daily quota; set them with `posthaste teams"
        f" update default`). Its API keys are shown once (also saved to {path}, mode 0600):",
        flush=True,
    )
    for created in keys:
        print(f"  {created.key.mode.value:4} key: {created.token}", flush=True)


def write_bootstrap_keys(data_dir: Path, keys: list[CreatedKey]) -> Path:
    """Keep the first-run keys in a 0600 file in the data directory."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "bootstrap-keys.txt"
    lines = [f"{k.key.mode.value} key: {k.token}" for k in keys]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("Team 'default' API keys (shown once):\n" + "\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path
