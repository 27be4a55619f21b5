"""``posthaste serve`` on several cores: processes per role, sized to the machine, supervised.

Python runs one core per process, so by default ``serve`` (role ``all``) starts its roles as
child processes, ``python -m posthaste.cli serve --role R``: API processes sharing the HTTP
socket the supervisor bound, relay processes sharing the SMTP ports (``SO_REUSEPORT``),
inbound SMTP processes sharing the inbound port, and worker processes (deliveries and
webhooks) sharing the queues through the database; below four cores the API, the relay and
the inbound server share one process (``Layout.for_cores``). Before any child starts, a
short-lived process (``server.prepare``) migrates, makes the first run's team and keys
(printed once) and the SMTP servers' self-signed certificate, so children never race for
them; the supervisor itself never imports the application and stays small.

A child that dies is started again after a backoff (0.5 s, doubling to 30 s; back to 0.5 s once
a child has run a minute). A child that cannot start at first (it exits, or reports an error,
before it listens) stops the others, and ``serve`` exits 1 with one line saying which and why.
SIGTERM/SIGINT reach every child, each drains as a lone process does, and one still running
after ``STOP_SECONDS`` is killed. See ``docs/deploying.md`` (process model, sizing).

Metrics: the children count in files of a directory made fresh for each run
(``PROMETHEUS_MULTIPROC_DIR``, private to this user), which ``GET /metrics`` in any API process
adds up; the files of a child that exited stay (its counts stay in the totals), and the
directory is removed when ``serve`` ends (``services/metrics.py``, ``docs/operations.md``); one
left by a supervisor killed with SIGKILL is removed by the next ``serve`` to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field

from posthaste.config import ALL_ROLES, Roles, Settings, roles_label
from posthaste.server import SHUTDOWN_GRACE_SECONDS

log = logging.getLogger(__name__)

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus_client in each child
# A run's metrics directory: this, the supervisor's pid, "-" and random letters.
METRICS_PREFIX = "posthaste-metrics-"

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
STEADY_SECONDS = 60.0  # a child that ran this long before dying restarts at FIRST_BACKOFF
STOP_SECONDS = SHUTDOWN_GRACE_SECONDS + 10  # a child's drain, then SIGKILL
HTTP_BACKLOG = 2048
# Delivery workers run at a lower CPU priority than the API and the relay (ten above the
# supervisor's): when the cores are full (a backlog being delivered), a client's request is
# served before the next batch is signed, and the workers take every cycle the front ends
# leave. Nice 10 weighs a worker about a tenth of a front end in Linux's scheduler (5 and 19
# measured beside it: bench/README.md, "Workers' priority"); it changes nothing while a core
# is idle.
WORKER_NICENESS = 10
SESSION_NICE_TRIES = 20  # ``set_session_nice``: 0.11 s apart


FRONT_CORES = 4  # below this many cores the API and the SMTP servers share one process

API: Roles = frozenset({"api"})
RELAY: Roles = frozenset({"smtp"})
INBOUND: Roles = frozenset({"inbound"})
WORKER: Roles = frozenset({"worker"})


@dataclass(frozen=True)
class Layout:
    """The processes to supervise, each with the roles it runs: sized by ``for_cores``."""

    processes: tuple[Roles, ...]

    @classmethod
    def for_cores(cls, cores: int, *, relay: bool, inbound: bool = False) -> Layout:
        """``cores`` worker processes (deliveries are the CPU-bound part), and one API, one
        relay and one inbound SMTP process per four cores (none for an SMTP server whose ports
        are off). Below four cores the API and the SMTP servers share one process: each Python
        process holds 85-130 MiB whatever it runs, and on two or three cores a process of their
        own buys them nothing the workers' lower priority does not (``WORKER_NICENESS``)."""
        smtp = (RELAY if relay else frozenset()) | (INBOUND if inbound else frozenset())
        if cores < FRONT_CORES:
            front = [API | smtp]
        else:
            share = cores // FRONT_CORES
            front = [API] * share
            front += [RELAY] * (share if relay else 0) + [INBOUND] * (share if inbound else 0)
        return cls(tuple(front + [WORKER] * cores))

    def labels(self) -> list[str]:
        """Each process's roles as ``--role`` takes them."""
        return [roles_label(roles) for roles in self.processes]


def _write_session_nice(pid: int, nice: int) -> None:
    with open(f"/proc/{pid}/autogroup", "w") as autogroup:  # a kernel's file: never blocks
        autogroup.write(str(nice))


async def set_session_nice(pid: int, nice: int) -> bool:
    """Give the session that ``pid`` leads the priority ``nice``; whether it took. Where Linux
    groups processes by session for scheduling (autogroup:
    ``/proc/sys/kernel/sched_autogroup_enabled``, for processes outside any CPU cgroup of their
    own), the CPU is shared between sessions first and a process's nice weighs only against
    its own session's others; each child leads a session of its own, so without this a
    worker's nice would change nothing and a ``nice posthaste serve`` would not reach the
    children. Nothing to do elsewhere (no such file: no autogroup; a cgroup of its own: the
    kernel ignores the value); a negative value needs privileges. Without CAP_SYS_ADMIN the
    kernel takes one such change per tenth of a second on the whole machine (EAGAIN, then
    tried again)."""
    for _ in range(SESSION_NICE_TRIES):
        try:
            _write_session_nice(pid, nice)
            return True
        except BlockingIOError:
            await asyncio.sleep(0.11)
        except OSError:
            return False
    return False


def machine_cores() -> int:
    """The cores this process may run on (its affinity, e.g. a container's cpuset)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def plan(settings: Settings) -> Layout | None:
    """The processes to supervise, or None when one process runs it all (``--processes 1``, a
    one-core machine) or runs the roles ``--role`` names."""
    if settings.role != ALL_ROLES:
        return None
    cores = settings.processes or machine_cores()
    if cores <= 1:
        return None
    relay = bool(settings.smtp_relay_port or settings.smtp_relay_tls_port)
    return Layout.for_cores(cores, relay=relay, inbound=bool(settings.smtp_inbound_port))


async def supervise(settings: Settings, layout: Layout) -> int:
    """Prepare once, start every child, keep them running until SIGTERM/SIGINT: 0, or 1 with
    one line on stderr when something cannot start."""
    try:
        http = _bind_http(settings)
    except OSError as exc:
        where = f"{settings.http_host}:{settings.http_port}"
        print(f"posthaste: cannot listen on {where} for the API: {_reason(exc)}", file=sys.stderr)
        return 1
    smtp: dict[int, socket.socket] = {}
    for port, what in _smtp_ports(settings, layout):
        try:
            smtp[port] = _bind(settings.http_host, port)
        except OSError as exc:
            for bound in (http, *smtp.values()):
                bound.close()
            where = f"{settings.http_host}:{port}"
            print(
                f"posthaste: cannot listen on {where} for {what}: {_reason(exc)}", file=sys.stderr
            )
            return 1
    with contextlib.ExitStack() as held:
        for bound in (http, *smtp.values()):
            held.enter_context(bound)
        code = await _prepare(settings)
        if code != 0:
            print(
                f"posthaste: preparing the database failed (exit code {code}; its log is above)",
                file=sys.stderr,
            )
            return 1
        _remove_orphaned_metrics_dirs(tempfile.gettempdir())
        metrics_dir = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")  # mode 0700
        try:
            supervisor = Supervisor(settings, layout, http, metrics_dir, smtp)
            return await supervisor.run()
        finally:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _remove_orphaned_metrics_dirs(parent: str) -> None:
    """Remove the metrics directories that supervisors killed with SIGKILL (or a lost machine
    state) left behind: each is named after its supervisor's pid, and one whose pid no longer
    runs is removed, if it is this user's. A directory of a live supervisor, another user's,
    or of an older name without a pid is left alone."""
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            pid = _metrics_dir_pid(entry.name)
            if pid is None or pid == os.getpid() or _pid_runs(pid):
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False) and entry.stat().st_uid == os.getuid():
                    shutil.rmtree(entry.path, ignore_errors=True)


def _metrics_dir_pid(name: str) -> int | None:
    """The supervisor pid in a metrics directory's name (``posthaste-metrics-<pid>-<random>``)."""
    if not name.startswith(METRICS_PREFIX):
        return None
    pid, dash, _ = name[len(METRICS_PREFIX) :].partition("-")
    return int(pid) if dash and pid.isdigit() else None


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it runs
    return True


def _bind_http(settings: Settings) -> socket.socket:
    """The HTTP socket, bound here once: API children share it, and it stays open while one is
    restarted (connections wait in the backlog instead of being refused)."""
    return _bind(settings.http_host, settings.http_port)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=HTTP_BACKLOG)


def _smtp_ports(settings: Settings, layout: Layout) -> list[tuple[int, str]]:
    """The SMTP ports the layout's children serve (0 = off), bound here like the HTTP port: a
    relay or MX process that restarts leaves its clients waiting, not refused."""
    roles = set().union(*layout.processes)
    ports = []
    if "smtp" in roles:
        ports += [(settings.smtp_relay_port, "the SMTP relay")]
        ports += [(settings.smtp_relay_tls_port, "the SMTP relay (TLS)")]
    if "inbound" in roles:
        ports += [(settings.smtp_inbound_port, "the inbound MX")]
    return [(port, what) for port, what in ports if port]


async def _prepare(settings: Settings) -> int:
    """What must happen once, before any child (schema, first-run keys, relay certificate),
    done by a short-lived process (``server.prepare``): the supervisor itself never imports
    the application, so it stays a small process for as long as ``serve`` runs."""
    command = [sys.executable, "-m", "posthaste.cli", "serve", "--supervised-prepare"]
    process = await asyncio.create_subprocess_exec(*command, env=_environ(settings))
    return await process.wait()


def _environ(settings: Settings) -> dict[str, str]:
    """This process's environment, with what the command line set here (host, port)."""
    environ = dict(os.environ)
    environ["POSTHASTE_HTTP_HOST"] = settings.http_host
    environ["POSTHASTE_HTTP_PORT"] = str(settings.http_port)
    environ["POSTHASTE_PUBLIC_URL"] = settings.public_url
    environ.pop("POSTHASTE_ROLE", None)
    environ.pop("POSTHASTE_PROCESSES", None)
    environ.pop(MULTIPROCESS_ENV, None)  # the children get this run's own (``_child_environ``)
    return environ


@dataclass
class Child:
    """One slot of the layout: the process running it now, and its restart backoff."""

    roles: Roles
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    backoff: float = FIRST_BACKOFF

    @property
    def role(self) -> str:
        """Its roles as ``--role`` names them (``api,smtp``), for the logs."""
        return roles_label(self.roles)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


@dataclass
class Supervisor:
    settings: Settings
    layout: Layout
    http: socket.socket
    metrics_dir: str
    smtp: dict[int, socket.socket] = field(default_factory=dict)  # port → its bound socket
    children: list[Child] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        self.children = [Child(roles) for roles in self.layout.processes]
        starting = asyncio.create_task(self._start_all())
        stopping = asyncio.create_task(self._stop.wait())
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # SIGTERM/SIGINT while children were starting
            starting.cancel()
            await self._stop_all()
            return 0
        stopping.cancel()
        failure = starting.result()
        if failure is not None:
            await self._stop_all()
            print(f"posthaste: {failure}", file=sys.stderr)
            return 1
        self._log_layout()
        watchers = [asyncio.create_task(self._watch(child)) for child in self.children]
        await self._stop.wait()
        for watcher in watchers:
            watcher.cancel()
        await self._stop_all()
        return 0

    async def _start_all(self) -> str | None:
        """Start every child and wait until each listens; the first failure, in words. The API
        processes start last, so that ``/readyz`` answering means every role is up."""
        for api in (False, True):
            group = [child for child in self.children if ("api" in child.roles) == api]
            outcomes = await asyncio.gather(*(self._start(child) for child in group))
            for child, outcome in zip(group, outcomes, strict=True):
                if outcome is not None:
                    return f"the {child.role} process (pid {child.pid}) could not start: {outcome}"
        return None

    async def _start(self, child: Child) -> str | None:
        """Start ``child`` and wait for its report: None once it listens, else why not."""
        read_end, write_end = os.pipe()
        try:
            child.process = await self._spawn(child.roles, write_end)
        finally:
            os.close(write_end)
        child.started_at = time.monotonic()
        line = await _read_report(read_end)
        if line == "ready":
            return None
        if line.startswith("error: "):
            return line.removeprefix("error: ")
        code = await child.process.wait()
        return f"it exited with code {code} before it listened (its log is above)"

    async def _spawn(self, roles: Roles, ready_fd: int) -> asyncio.subprocess.Process:
        command = [sys.executable, "-m", "posthaste.cli", "serve", "--role", roles_label(roles)]
        command += ["--supervised-ready-fd", str(ready_fd)]
        fds = [ready_fd]
        if "api" in roles:
            command += ["--supervised-http-fd", str(self.http.fileno())]
            fds.append(self.http.fileno())
        for port in self._smtp_ports_of(roles):
            command += ["--supervised-smtp-fd", f"{port}={self.smtp[port].fileno()}"]
            fds.append(self.smtp[port].fileno())
        # A session of its own: a terminal's Ctrl-C reaches the supervisor alone, which stops
        # the children in order; stdin is the lifeline (``server._until_stopped``).
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            pass_fds=fds,
            env=self._child_environ(),
            start_new_session=True,
        )
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        if roles == WORKER:
            nice = min(19, nice + WORKER_NICENESS)
            with contextlib.suppress(ProcessLookupError):  # it died at once: ``_start`` says so
                os.setpriority(os.PRIO_PROCESS, process.pid, nice)
        if not await set_session_nice(process.pid, nice):
            log.debug("the %s process's session keeps its priority", roles_label(roles))
        return process

    def _smtp_ports_of(self, roles: Roles) -> list[int]:
        settings = self.settings
        ports = []
        if "smtp" in roles:
            ports += [settings.smtp_relay_port, settings.smtp_relay_tls_port]
        if "inbound" in roles:
            ports.append(settings.smtp_inbound_port)
        return [port for port in ports if port in self.smtp]

    def _child_environ(self) -> dict[str, str]:
        environ = _environ(self.settings)
        environ["POSTHASTE_HTTP_PORT"] = str(self.http.getsockname()[1])  # when given as 0
        environ[MULTIPROCESS_ENV] = self.metrics_dir
        return environ

    async def _watch(self, child: Child) -> None:
        """Start ``child`` again whenever it dies, after its backoff."""
        while True:
            assert child.process is not None
            code = await child.process.wait()
            self._forget(child.pid)
            ran = time.monotonic() - child.started_at
            if ran >= STEADY_SECONDS:
                child.backoff = FIRST_BACKOFF
            log.warning(
                "%s process %s exited (code %s); starting another in %.1fs",
                child.role,
                child.pid,
                code,
                child.backoff,
                extra={"fields": {"role": child.role, "pid": child.pid, "exit_code": code}},
            )
            await asyncio.sleep(child.backoff)
            if self._stop.is_set():
                return
            child.backoff = min(child.backoff * 2, MAX_BACKOFF)
            failure = await self._start(child)
            fields = {"fields": {"role": child.role, "pid": child.pid}}
            if failure is None:
                log.warning("%s process %s started", child.role, child.pid, extra=fields)
            else:
                log.error("%s process %s could not start: %s", child.role, child.pid, failure)

    async def _stop_all(self) -> None:
        """SIGTERM to every child, wait for their drain, SIGKILL whoever is left."""
        self.http.close()  # the API children hold their own copies until they finish
        running = [child for child in self.children if child.running]
        for child in running:
            with contextlib.suppress(ProcessLookupError):
                assert child.process is not None
                child.process.terminate()
        waits = [child.process.wait() for child in running if child.process is not None]
        if not waits:
            return
        _, pending = await asyncio.wait(
            [asyncio.ensure_future(w) for w in waits], timeout=STOP_SECONDS
        )
        if pending:
            for child in running:
                if child.running:
                    assert child.process is not None
                    log.warning("%s process %s did not stop; killing it", child.role, child.pid)
                    with contextlib.suppress(ProcessLookupError):
                        child.process.kill()
            await asyncio.wait(pending)

    def _forget(self, pid: int | None) -> None:
        """A child has exited: its live gauges leave the totals (its counters stay)."""
        from prometheus_client.multiprocess import mark_process_dead

        if pid is not None:
            mark_process_dead(pid, self.metrics_dir)  # type: ignore[no-untyped-call]

    def _log_layout(self) -> None:
        labels = dict.fromkeys(self.layout.labels())
        pids = {label: [c.pid for c in self.children if c.role == label] for label in labels}
        log.info(
            "serving with %d processes: %s",
            len(self.children),
            ", ".join(f"{role} {pids[role]}" for role in pids if pids[role]),
            extra={"fields": {"processes": pids}},
        )


async def _read_report(read_end: int) -> str:
    """The one line a child writes on its report pipe ("" if it closed it without a word)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(read_end, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        return (await reader.readline()).decode(errors="replace").strip()
    finally:
        transport.close()


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)
