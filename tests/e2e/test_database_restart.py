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
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from posthaste.smtp.tls import CERT_FILENAME
from tests.conftest import SECRET
from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import Serve, _bootstrap_keys, start_serve
from tests.e2e.load import Load, until, verify_sender_domain
from tests.pg_cluster import Cluster, private_cluster
from tests.ports import free_port
from tests.smtp_sink import Sink, running_sink


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with private_cluster(free_port()) as running:
        yield running


@pytest.fixture
def dns_host() -> Iterator[ZoneServer]:
    yield from running_zone()


async def test_a_database_restart_under_load_answers_503_and_loses_nothing(
    cluster: Cluster, dns_host: ZoneServer, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(cluster.admin_dsn)
    await conn.execute("CREATE DATABASE posthaste")
    await conn.close()
    sink = Sink()
    async with running_sink(sink):
        server, env = await asyncio.to_thread(start_server, cluster, dns_host, sink, tmp_path)
        url = server.url
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
            await asyncio.to_thread(server.stop)


def start_server(
    cluster: Cluster, dns_host: ZoneServer, sink: Sink, tmp_path: Path
) -> tuple[Serve, dict[str, str]]:
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
    return start_serve(env, log=data_dir / "server.log", cwd=tmp_path), env
