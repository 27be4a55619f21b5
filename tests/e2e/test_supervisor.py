"""``posthaste serve --processes 2``: a process per role, restarted when killed, stopped cleanly.

Real processes: the supervisor and its children (``python -m posthaste.cli serve --role R``),
found through ``/proc`` by their parent's pid and their command line.
"""

from __future__ import annotations

import asyncio
import os
import signal
import smtplib
import socket
import ssl
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from posthaste.smtp.tls import CERT_FILENAME
from posthaste.supervisor import WORKER_NICENESS
from tests.conftest import PG_ADMIN_DSN, SECRET, _pg_admin
from tests.e2e.conftest import _bootstrap_keys
from tests.helpers import session_nice, until
from tests.ports import free_port

SIMULATED = "delivered@simulator.test"


def children(pid: int) -> dict[int, str]:
    """The live child processes of ``pid``, each with the role on its command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) != pid or fields[0] == "Z":
            continue
        args = [part.decode() for part in cmdline]
        if "--role" in args:
            found[int(entry.name)] = args[args.index("--role") + 1]
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    url: str
    env: dict[str, str]
    data_dir: Path
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def roles(self) -> Counter[str]:
        return Counter(children(self.process.pid).values())

    def pid_of(self, role: str) -> int:
        return next(pid for pid, r in children(self.process.pid).items() if r == role)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)


@pytest.fixture(params=["sqlite", "postgres"])
def base_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    data_dir = tmp_path / "posthaste-data"
    data_dir.mkdir()
    env = {
        **os.environ,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_HTTP_PORT": str(free_port()),
        "POSTHASTE_SMTP_RELAY_PORT": str(free_port()),
        "POSTHASTE_SMTP_RELAY_TLS_PORT": str(free_port()),
        "POSTHASTE_SMTP_INBOUND_PORT": str(free_port()),
        "POSTHASTE_LOG_LEVEL": "warning",
        # A killed worker's claimed jobs wait out their lease: keep it short.
        "POSTHASTE_JOB_LEASE": "2s",
    }
    env.pop("POSTHASTE_PROCESSES", None)
    if request.param == "sqlite":
        yield env
        return
    name = f"posthaste_sup_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL is required for this test: {exc}")
    env["POSTHASTE_DATABASE_URL"] = f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{name}"
    env["POSTHASTE_SECRET_KEY"] = SECRET
    yield env
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def start(env: dict[str, str], *args: str) -> Serve:
    data_dir = Path(env["POSTHASTE_DATA_DIR"])
    log = data_dir.parent / f"serve-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "posthaste.cli", "serve", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=data_dir.parent,
        )
    return Serve(process, f"http://127.0.0.1:{env['POSTHASTE_HTTP_PORT']}", env, data_dir, log)


@pytest.fixture
def serving(base_env: dict[str, str]) -> Iterator[Serve]:
    serve = start(base_env, "--processes", "2")
    try:
        until(lambda: _ready(serve), "the supervised server to answer /readyz")
        yield serve
    finally:
        if serve.process.poll() is None:
            serve.process.kill()
            serve.process.wait(30)


# One client for every probe: each ``httpx.get`` makes a client that loads the CA bundle (40-80 ms
# of CPU), and probing every 50 ms with it took half a core from the servers being waited for.
# No connection is kept: the servers it asks come and go.
_PROBE = httpx.Client(timeout=2, limits=httpx.Limits(max_keepalive_connections=0))


def _ready(serve: Serve) -> bool:
    if serve.process.poll() is not None:
        raise AssertionError(f"serve exited early:\n{serve.output()}")
    try:
        return _PROBE.get(f"{serve.url}/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def send(client: httpx.Client, n: int) -> str:
    response = client.post(
        "/emails",
        json={"from": "hi@acme.test", "to": SIMULATED, "subject": f"m{n}", "text": "t"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    email_id: str = response.json()["id"]
    return email_id


def all_delivered(client: httpx.Client, ids: list[str]) -> bool:
    statuses = [client.get(f"/emails/{i}").json()["last_event"] for i in ids]
    return all(status == "email.delivered" for status in statuses)


def priorities(serve: Serve) -> dict[str, int]:
    """Each child's nice, checked to be its session's too: each leads a session of its own,
    and where the kernel shares the CPU between sessions first, only the session's nice
    weighs against the other processes."""
    found = {}
    for pid, role in children(serve.process.pid).items():
        nice = os.getpriority(os.PRIO_PROCESS, pid)
        assert os.getsid(pid) == pid, role
        assert session_nice(pid) in (None, nice), (role, session_nice(pid), nice)
        found[role] = nice
    return found


def test_children_restarted_when_killed_and_all_stopped_on_sigterm(serving: Serve) -> None:
    # Two cores: the API and the SMTP servers share a process, a worker per core.
    assert serving.roles() == Counter({"api,smtp,inbound": 1, "worker": 2})
    # The front end keeps the supervisor's CPU priority; workers yield the CPU to it.
    ours = os.getpriority(os.PRIO_PROCESS, serving.process.pid)
    assert priorities(serving) == {
        "api,smtp,inbound": ours,
        "worker": min(19, ours + WORKER_NICENESS),
    }
    key = _bootstrap_keys(serving.data_dir)["test"]
    headers = {"Authorization": f"Bearer {key}"}
    # A new connection per request: a kept one dies with the process that accepted it.
    no_keepalive = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=serving.url, headers=headers, limits=no_keepalive) as client:
        ids = [send(client, n) for n in range(5)]
        for role in ("worker", "api,smtp,inbound"):
            killed = serving.pid_of(role)
            os.kill(killed, signal.SIGKILL)
            if role != "worker":  # the SMTP sockets are the supervisor's: a client waits
                relay_port = int(serving.env["POSTHASTE_SMTP_RELAY_PORT"])
                with smtplib.SMTP("127.0.0.1", relay_port, timeout=60) as smtp:
                    assert smtp.ehlo()[0] == 250
            # The API socket is the supervisor's: sends wait for the new API process, never fail.
            ids += [send(client, n) for n in range(5)]
            replaced = until(
                lambda r=role, k=killed: (
                    serving.roles()[r] == 1 + (r == "worker")
                    and k not in children(serving.process.pid)
                ),
                f"a new {role} process",
            )
            assert replaced
            until(lambda k=killed: f"process {k} exited (code -9)" in serving.output(), "the log")
        until(lambda: all_delivered(client, ids), "every accepted email to be delivered")
    pids = list(children(serving.process.pid))
    assert serving.stop() == 0, serving.output()
    assert not [pid for pid in pids if alive(pid)]


def test_four_cores_get_a_child_per_role(base_env: dict[str, str]) -> None:
    serve = start(base_env, "--processes", "4")
    try:
        until(lambda: _ready(serve), "the supervised server to answer /readyz")
        assert serve.roles() == Counter({"api": 1, "smtp": 1, "inbound": 1, "worker": 4})
        ours = os.getpriority(os.PRIO_PROCESS, serve.process.pid)
        assert priorities(serve) == {
            "api": ours,
            "smtp": ours,
            "inbound": ours,
            "worker": min(19, ours + WORKER_NICENESS),
        }
        pids = list(children(serve.process.pid))
        assert serve.stop() == 0, serve.output()
        assert not [pid for pid in pids if alive(pid)]
    finally:
        if serve.process.poll() is None:
            serve.process.kill()
            serve.process.wait(30)


def test_a_taken_relay_port_stops_serve_with_one_line(base_env: dict[str, str]) -> None:
    """The supervisor binds the SMTP ports itself (as the HTTP port), before any child starts:
    a taken one is said at once, and no child is started."""
    relay_port = int(base_env["POSTHASTE_SMTP_RELAY_PORT"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", relay_port))
        taken.listen()
        serve = start(base_env, "--processes", "2")
        code = serve.process.wait(120)
    assert code == 1
    reasons = [line for line in serve.output().splitlines() if line.startswith("posthaste: ")]
    assert reasons == [
        f"posthaste: cannot listen on 127.0.0.1:{relay_port} for the SMTP relay: "
        "Address already in use"
    ]
    assert not children(serve.process.pid)


def test_a_taken_http_port_stops_serve_with_one_line(base_env: dict[str, str]) -> None:
    port = int(base_env["POSTHASTE_HTTP_PORT"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        serve = start(base_env, "--processes", "2")
        code = serve.process.wait(120)
    assert code == 1
    reasons = [line for line in serve.output().splitlines() if line.startswith("posthaste: ")]
    assert reasons == [
        f"posthaste: cannot listen on 127.0.0.1:{port} for the API: Address already in use"
    ]


def test_children_stop_when_the_supervisor_is_killed(serving: Serve) -> None:
    pids = list(children(serving.process.pid))
    assert len(pids) == 3  # the API with the SMTP servers, two workers
    serving.process.kill()
    serving.process.wait(30)
    # Their stdin, a pipe the supervisor held, has closed: each drains and exits by itself.
    until(lambda: not [pid for pid in pids if alive(pid)], "every child to exit")


def test_sigint_stops_every_child_too(serving: Serve) -> None:
    pids = list(children(serving.process.pid))
    serving.process.send_signal(signal.SIGINT)
    assert serving.process.wait(60) == 0, serving.output()
    assert not [pid for pid in pids if alive(pid)]


def test_a_database_that_cannot_be_prepared_stops_serve_with_one_line(
    base_env: dict[str, str],
) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {
        **base_env,
        "POSTHASTE_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/nowhere",
        "POSTHASTE_SECRET_KEY": "s" * 40,
    }
    serve = start(env, "--processes", "2")
    code = serve.process.wait(120)
    assert code == 1
    reasons = [line for line in serve.output().splitlines() if line.startswith("posthaste: ")]
    assert reasons and reasons[-1].startswith("posthaste: preparing the database failed")
    assert not children(serve.process.pid)


def scrape(serve: Serve) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    answer = httpx.get(f"{serve.url}/metrics", timeout=30)
    assert answer.status_code == 200, answer.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def relay_send(serve: Serve, key: str) -> None:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "hi@acme.test", SIMULATED, "relayed"
    msg.set_content("Relayed.\n")
    context = ssl.create_default_context(cafile=str(serve.data_dir / CERT_FILENAME))
    port = int(serve.env["POSTHASTE_SMTP_RELAY_PORT"])
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.starttls(context=context)
        client.login("posthaste", key)
        client.send_message(msg)


def metrics_dir(serve: Serve) -> Path:
    """The directory the supervisor gave its children (read from a child's environment)."""
    pid = next(iter(children(serve.process.pid)))
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    [entry] = [e for e in environ if e.startswith(b"PROMETHEUS_MULTIPROC_DIR=")]
    return Path(entry.split(b"=", 1)[1].decode())


def test_metrics_add_up_every_process_and_survive_restarts(serving: Serve) -> None:
    """Emails accepted by the API process and delivered by the two worker processes are all
    in one scrape; killing the API process and a worker loses no count."""
    accepted = "posthaste_emails_accepted_total"
    api = frozenset({("origin", "api"), ("stream", "transactional")})
    relay = frozenset({("origin", "relay"), ("stream", "transactional")})
    delivered = ("posthaste_delivery_seconds_count", frozenset())
    key = _bootstrap_keys(serving.data_dir)["test"]
    headers = {"Authorization": f"Bearer {key}"}
    no_keepalive = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=serving.url, headers=headers, limits=no_keepalive) as client:
        ids = [send(client, n) for n in range(4)]
        relay_send(serving, key)
        until(lambda: scrape(serving).get(delivered) == 5, "five deliveries in the metrics")
        found = scrape(serving)
        assert found[accepted, api] == 4 and found[accepted, relay] == 1
        assert found["posthaste_emails_total", frozenset({("status", "delivered")})] == 5
        assert (
            found[
                "posthaste_smtp_sessions_total",
                frozenset({("server", "relay"), ("outcome", "accepted")}),
            ]
            == 1
        )
        directory = metrics_dir(serving)
        assert directory.is_dir() and oct(directory.stat().st_mode & 0o777) == "0o700"
        for role in ("worker", "api,smtp,inbound"):
            killed = serving.pid_of(role)
            os.kill(killed, signal.SIGKILL)
            until(
                lambda r=role, k=killed: (
                    serving.roles()[r] == 1 + (r == "worker")
                    and k not in children(serving.process.pid)
                ),
                f"a new {role} process",
            )
        until(lambda: _ready(serving), "the new API process")
        after = scrape(serving)
        assert after[accepted, api] == 4 and after[accepted, relay] == 1
        assert after[delivered] == 5
        ids.append(send(client, 9))
        until(lambda: all_delivered(client, ids), "every accepted email to be delivered")
        until(lambda: scrape(serving).get(delivered) == 6, "the sixth delivery in the metrics")
        assert scrape(serving)[accepted, api] == 5
    assert serving.stop() == 0, serving.output()
    assert not directory.exists()
