"""``posthaste serve``: the API, the SMTP relay, the inbound SMTP server and the workers in one
process, or one role.

On several cores ``serve`` supervises one process per role (``supervisor.py``); each child runs
``serve`` here with a ``Supervised`` link: the supervisor has migrated and bootstrapped already,
hands it the HTTP socket, hears through a pipe when its roles listen, and holds its stdin open
(when the supervisor is gone, however it ended, the child stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from posthaste.config import Settings

# Each role imports what it runs when it starts (``Roles.start``): a worker process never
# loads the web framework, an API process never loads the SMTP server, and the supervisor,
# which imports this module for its constants, loads none of them.
if TYPE_CHECKING:
    import uvicorn

    from posthaste.bootstrap import Services
    from posthaste.services.api_keys import CreatedKey
    from posthaste.smtp.inbound import InboundServer
    from posthaste.smtp.relay import RelayServer
    from posthaste.workers.runner import Worker

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_SECONDS = 10
GC_THRESHOLD = 20_000  # allocations between young collections (Python's default: 700)


@dataclass(frozen=True)
class Supervised:
    """The link of a process started by the supervisor (the hidden ``serve`` options)."""

    ready_fd: int  # write "ready" or "error: <reason>", one line, then close
    http_fd: int | None = None  # the HTTP socket, bound once by the supervisor
    smtp_fds: tuple[tuple[int, int], ...] = ()  # (port, fd): the SMTP sockets it bound

    def http_socket(self) -> socket.socket | None:
        return None if self.http_fd is None else socket.socket(fileno=self.http_fd)

    def smtp_sockets(self) -> dict[int, socket.socket]:
        return {port: socket.socket(fileno=fd) for port, fd in self.smtp_fds}

    def report(self, line: str) -> None:
        with contextlib.suppress(OSError), os.fdopen(self.ready_fd, "w") as pipe:
            pipe.write(line.replace("\n", " ") + "\n")


class Roles:
    """The parts this process runs, started together and stopped gracefully together."""

    def __init__(
        self,
        services: Services,
        http_socket: socket.socket | None = None,
        smtp_sockets: dict[int, socket.socket] | None = None,
    ) -> None:
        self.services = services
        self.http_socket = http_socket
        self.smtp_sockets = smtp_sockets or {}
        self.worker: Worker | None = None
        self.api: uvicorn.Server | None = None
        self.relay: RelayServer | None = None
        self.inbound: InboundServer | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        roles = self.services.settings.role
        if "worker" in roles:
            self.worker = self.services.make_worker()
            self.tasks.append(asyncio.create_task(self.worker.run(), name="worker"))
            dispatcher = self.services.make_webhook_dispatcher()
            self.tasks.append(asyncio.create_task(dispatcher.run(), name="webhooks"))
        if "api" in roles:
            self.api = _api_server(self.services)
            sockets = None if self.http_socket is None else [self.http_socket]
            self.tasks.append(asyncio.create_task(_serve_api(self.api, sockets), name="api"))
        if "smtp" in roles:
            from posthaste.smtp.relay import RelayServer

            self.relay = RelayServer.from_settings(self.services, self.smtp_sockets)
            if self.relay.listeners:
                self.tasks.append(asyncio.create_task(self.relay.run(), name="smtp-relay"))
            elif roles == {"smtp"}:
                log.warning("the smtp role has nothing to run: both relay ports are 0 (off)")
        if "inbound" in roles:
            from posthaste.smtp.inbound import InboundServer

            self.inbound = InboundServer.from_settings(self.services, self.smtp_sockets)
            if self.inbound.listeners:
                self.tasks.append(asyncio.create_task(self.inbound.run(), name="smtp-inbound"))
            elif roles == {"inbound"}:
                log.warning("the inbound role has nothing to run: its port is 0 (off)")

    async def wait_listening(self) -> None:
        """Until the API and the SMTP servers listen; a role that ends first raises its error."""
        while not self._listening():
            for task in self.tasks:
                if task.done():
                    error = None if task.cancelled() else task.exception()
                    raise RuntimeError(str(error) if error else f"the {task.get_name()} ended")
            await asyncio.sleep(0.01)

    def _listening(self) -> bool:
        api_up = self.api is None or self.api.started
        smtp_up = all(
            server is None or len(server.servers) == len(server.listeners)
            for server in (self.relay, self.inbound)
        )
        return api_up and smtp_up

    async def stop(self) -> None:
        if self.api is not None:
            self.api.should_exit = True
        if self.worker is not None:
            self.worker.stop()
        if self.relay is not None:
            self.relay.stop()
        if self.inbound is not None:
            self.inbound.stop()
        for dispatcher in self.services.dispatchers:
            dispatcher.stop()
        if self.tasks:
            _, pending = await asyncio.wait(self.tasks, timeout=SHUTDOWN_GRACE_SECONDS)
            for task in pending:
                task.cancel()


async def serve(settings: Settings, supervised: Supervised | None = None) -> int:
    """Run this process's roles until SIGTERM/SIGINT (0), or until one fails (1, with why)."""
    from posthaste.bootstrap import build_services, migrate

    if supervised is None:
        await migrate(settings)
    services = build_services(settings)
    if supervised is None:
        roles = Roles(services)
    else:
        roles = Roles(services, supervised.http_socket(), supervised.smtp_sockets())
    try:
        if supervised is None:
            await announce_bootstrap(services)
            await services.retention.ensure_scheduled()
            await services.tls_reports.ensure_scheduled()
        roles.start()
        await services.db.start_listening()
        settle_heap()
        if supervised is not None:
            await _report_listening(roles, supervised)
        await _until_stopped(roles.tasks, lifeline=supervised is not None)
    finally:
        await roles.stop()
        await services.close()
    # A supervised child has told the supervisor, which says it once for all.
    return _failure(roles.tasks, say=supervised is None)


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


async def _report_listening(roles: Roles, supervised: Supervised) -> None:
    try:
        await roles.wait_listening()
    except RuntimeError as exc:
        supervised.report(f"error: {exc}")
        return  # the failed role's task is done: ``_until_stopped`` returns at once
    supervised.report("ready")


def _failure(tasks: list[asyncio.Task[None]], *, say: bool) -> int:
    """1 when a role ended with an error (``say``: with why, on stderr); else 0."""
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            if say:
                print(
                    f"posthaste: the {task.get_name()} stopped: {task.exception()}", file=sys.stderr
                )
            return 1
    return 0


async def _until_stopped(tasks: list[asyncio.Task[None]], *, lifeline: bool = False) -> None:
    """Until SIGINT/SIGTERM, or until a role ends by itself (e.g. the port is taken); with
    ``lifeline``, also once stdin closes (the supervisor holds it open while it lives)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if lifeline:
        loop.add_reader(sys.stdin.fileno(), _on_lifeline, stop)
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if lifeline:
            loop.remove_reader(sys.stdin.fileno())


def _on_lifeline(stop: asyncio.Event) -> None:
    if not os.read(sys.stdin.fileno(), 512):  # end of file: the supervisor is gone
        stop.set()


async def _serve_api(server: uvicorn.Server, sockets: list[socket.socket] | None) -> None:
    from fastapi import FastAPI

    from posthaste.api.app import warm_up

    if isinstance(server.config.app, FastAPI):  # always: _api_server made it
        await warm_up(server.config.app)
    await server.serve(sockets)


def _api_server(services: Services) -> uvicorn.Server:
    import uvicorn

    from posthaste.api.app import create_app

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
        # Behind trusted reverse proxies only: the client's address (tracking events, the
        # metrics' loopback check) and scheme then come from their X-Forwarded-* headers.
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies) or None,
        # Open event streams never end by themselves: close them, rather than wait out the grace.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS // 2,
    )
    server = uvicorn.Server(config)
    log.info("API listening on http://%s:%s", settings.http_host, settings.http_port)
    return server


async def prepare(settings: Settings) -> int:
    """What the supervisor has done once, before its children start (``supervisor.py``): the
    schema, the first run's team and keys (printed here), the relay's certificate."""
    from posthaste.bootstrap import build_services, migrate
    from posthaste.smtp.tls import certificate_files

    await migrate(settings)
    services = build_services(settings)
    try:
        await announce_bootstrap(services)
        await services.retention.ensure_scheduled()
        await services.tls_reports.ensure_scheduled()
    finally:
        await services.close()
    if settings.smtp_relay_port or settings.smtp_relay_tls_port or settings.smtp_inbound_port:
        certificate_files(settings)
    return 0


async def announce_bootstrap(services: Services) -> None:
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
