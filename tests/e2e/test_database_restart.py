"""PostgreSQL restarted under load: the service answers 503 (the relay a 4xx) while the database is
away, never a 500 or a dropped session, and recovers by itself; every acknowledged email is
delivered, at most twice.

A real ``posthaste serve`` runs on a private PostgreSQL server (tests/pg_cluster.py) that the test
restarts with ``pg_ctl restart -m fast`` (sessions ended, connections refused until it is back)
while REST and SMTP relay clients keep sending.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import aiosmtplib
import asyncpg
import httpx
import pytest

from posthaste.smtp.tls import CERT_FILENAME
from tests.conftest import SECRET
from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import _bootstrap_keys, _wait_ready, free_port
from tests.pg_cluster import Cluster, private_cluster
from tests.smtp_sink import Sink, running_sink

SENDER = "hello@acme.test"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with private_cluster(free_port()) as running:
        yield running


@pytest.fixture
def dns_host() -> Iterator[ZoneServer]:
    yield from running_zone()


class Load:
    """Clients that keep sending until told to stop, and what each was answered."""

    def __init__(self, url: str, key: str, relay_port: int, cert: Path) -> None:
        self.url, self.key, self.relay_port = url, key, relay_port
        self.tls = ssl.create_default_context(cafile=str(cert))
        self.stop = asyncio.Event()
        self.http_statuses: Counter[int] = Counter()
        self.smtp_replies: Counter[str] = Counter()
        self.accepted: dict[str, str] = {}  # recipient → email id
        self.sent = 0

    def next_recipient(self, kind: str) -> str:
        self.sent += 1
        return f"{kind}{self.sent}@example.com"

    async def rest(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30) as http:
            while not self.stop.is_set():
                to = self.next_recipient("rest")
                body = {"from": SENDER, "to": to, "subject": "Restart", "text": "Hi"}
                try:
                    response = await http.post("/emails", json=body)
                except httpx.TransportError as exc:  # the server never drops a request
                    self.http_statuses[-1] += 1
                    print("transport error:", exc)
                    continue
                self.http_statuses[response.status_code] += 1
                if response.status_code == 200:
                    self.accepted[to] = response.json()["id"]
                elif response.status_code != 503:
                    print(response.status_code, response.text)
                await asyncio.sleep(0.01)  # a steady stream, not a flood: ~50/s per client

    async def relay(self) -> None:
        while not self.stop.is_set():
            to = self.next_recipient("relay")
            message = EmailMessage()
            message["From"], message["To"], message["Subject"] = SENDER, to, "Restart"
            message.set_content("Over the relay.\n")
            client = aiosmtplib.SMTP(
                hostname="127.0.0.1", port=self.relay_port, tls_context=self.tls, timeout=30
            )
            try:
                await client.connect(start_tls=True)
                await client.login("posthaste", self.key)
                _, reply = await client.send_message(message)
                self.smtp_replies["250"] += 1
                self.accepted[to] = reply.removeprefix("OK ").strip()
            except aiosmtplib.SMTPResponseException as exc:
                self.smtp_replies[str(exc.code)] += 1
                if exc.code // 100 != 4:
                    print("relay:", exc.code, exc.message)
            except aiosmtplib.SMTPException as exc:  # a dropped session
                self.smtp_replies["dropped"] += 1
                print("relay dropped:", exc)
            finally:
                client.close()


async def test_a_database_restart_under_load_answers_503_and_loses_nothing(
    cluster: Cluster, dns_host: ZoneServer, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(cluster.admin_dsn)
    await conn.execute("CREATE DATABASE posthaste")
    await conn.close()
    sink = Sink()
    async with running_sink(sink):
        server, url, env = await asyncio.to_thread(start_server, cluster, dns_host, sink, tmp_path)
        try:
            key = _bootstrap_keys(tmp_path / "data")["live"]
            await verify_sender_domain(url, key, dns_host)
            load = Load(
                url,
                key,
                int(env["POSTHASTE_SMTP_RELAY_PORT"]),
                tmp_path / "data" / CERT_FILENAME,
            )
            clients = [
                asyncio.create_task(load.rest()),
                asyncio.create_task(load.rest()),
                asyncio.create_task(load.relay()),
            ]
            await until(lambda: len(load.accepted) >= 30, "emails accepted before the restart")
            await asyncio.to_thread(cluster.restart)
            before = len(load.accepted)
            await until(
                lambda: len(load.accepted) >= before + 30 and load.smtp_replies["250"] >= 3,
                "the service to accept again after the restart",
                seconds=90,
            )
            load.stop.set()
            await asyncio.gather(*clients)

            print("HTTP answers:", dict(load.http_statuses), "relay:", dict(load.smtp_replies))
            assert set(load.http_statuses) <= {200, 503}
            assert {reply[0] for reply in load.smtp_replies} <= {"2", "4"}
            wanted = set(load.accepted)
            seen = lambda: Counter(r for m in sink.messages for r in m.recipients)  # noqa: E731
            await until(lambda: wanted <= set(seen()), "every accepted email at the sink", 120)
            assert max(seen().values()) <= 2
        except BaseException:
            print((tmp_path / "data" / "server.log").read_text())
            raise
        finally:
            server.terminate()
            await asyncio.to_thread(server.wait, 15)


def start_server(
    cluster: Cluster, dns_host: ZoneServer, sink: Sink, tmp_path: Path
) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_DATABASE_URL": cluster.url("posthaste"),
        "POSTHASTE_SECRET_KEY": SECRET,
        "POSTHASTE_HTTP_PORT": str(port),
        "POSTHASTE_SMTP_RELAY_PORT": str(free_port()),
        "POSTHASTE_SMTP_RELAY_TLS_PORT": str(free_port()),
        "POSTHASTE_SMTP_INBOUND_PORT": str(free_port()),
        "POSTHASTE_DELIVERY": f"smtp://127.0.0.1:{sink.port}?tls=none",
        "POSTHASTE_DELIVERY_RETRY_SCHEDULE": "1s",
        # A job whose worker lost the database mid-way is claimed again when its lease runs out.
        "POSTHASTE_JOB_LEASE": "2s",
        "POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}",
        "POSTHASTE_LOG_LEVEL": "warning",
        "POSTHASTE_PROCESSES": "1",
    }
    log = data_dir / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "posthaste.cli", "serve"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    url = f"http://127.0.0.1:{port}"
    _wait_ready(url, process, log)
    return process, url, env


async def verify_sender_domain(url: str, key: str, dns_host: ZoneServer) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        created = await http.post("/domains", json={"name": "acme.test"})
        assert created.status_code == 201, created.text
        for record in created.json()["records"]:
            if record["type"] == "TXT":
                dns_host.add(record["name"], "TXT", record["value"])
            elif record["type"] == "MX":
                dns_host.add(record["name"], "MX", (record["priority"], record["value"]))
            elif record["type"] == "CNAME":
                dns_host.add(record["name"], "CNAME", record["value"])
        verified = await http.post(f"/domains/{created.json()['id']}/verify")
        assert verified.json()["status"] == "verified", verified.text


async def until(condition: object, what: str, seconds: float = 60) -> None:
    assert callable(condition)
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
