"""A fleet on one PostgreSQL database, as docs/deploying.md sets it up: two ``serve --role api``
processes, a ``--role smtp`` relay and two ``--role worker`` processes. REST clients send through
both API processes and a relay client through the relay while one worker is SIGKILLed: every
acknowledged email reaches the sink (at most twice: a delivery cut short by the kill), every
email.sent event reaches the webhook receiver, and the surviving worker takes over the killed
one's jobs once their lease runs out.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from posthaste.smtp.tls import CERT_FILENAME
from tests.conftest import SECRET
from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import Serve, _bootstrap_keys, fresh_pg_database, start_serve
from tests.e2e.load import Load, until, verify_sender_domain
from tests.e2e.test_crash_under_load import sent_events
from tests.ports import free_port
from tests.smtp_sink import Sink, running_sink
from tests.webhook_receiver import running_receiver


@pytest.fixture
def dns_host() -> Iterator[ZoneServer]:
    yield from running_zone()


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_pg_database("posthaste_fleet") as url:
        yield url


def launch(env: dict[str, str], role: str, log: Path) -> Serve:
    """``serve --role role``; an API process once it is ready."""
    return start_serve(env, "--role", role, log=log, ready=role == "api")


async def test_a_fleet_delivers_everything_while_a_worker_is_killed(
    database_url: str, dns_host: ZoneServer, tmp_path: Path
) -> None:
    sink = Sink()
    processes: list[Serve] = []
    log = tmp_path / "fleet.log"
    async with running_sink(sink), running_receiver() as receiver:
        base = {
            **os.environ,
            "POSTHASTE_DATABASE_URL": database_url,
            "POSTHASTE_SECRET_KEY": SECRET,
            "POSTHASTE_DATA_DIR": str(tmp_path),
            "POSTHASTE_SMTP_RELAY_PORT": str(free_port()),
            "POSTHASTE_SMTP_RELAY_TLS_PORT": "0",
            "POSTHASTE_SMTP_INBOUND_PORT": "0",
            "POSTHASTE_DELIVERY": f"smtp://127.0.0.1:{sink.port}?tls=none",
            "POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}",
            "POSTHASTE_DELIVERY_RETRY_SCHEDULE": "1s",
            "POSTHASTE_WEBHOOK_ALLOW_PRIVATE": "true",
            "POSTHASTE_JOB_LEASE": "2s",
            "POSTHASTE_LOG_LEVEL": "warning",
        }
        urls = []
        try:
            for _ in range(2):  # the first makes the schema, the team and its keys
                port = free_port()
                env = {**base, "POSTHASTE_HTTP_PORT": str(port)}
                processes.append(await asyncio.to_thread(launch, env, "api", log))
                urls.append(processes[-1].url)
            relay = launch({**base, "POSTHASTE_HTTP_PORT": str(free_port())}, "smtp", log)
            workers = [launch(base, "worker", log) for _ in range(2)]
            processes += [relay, *workers]
            key = _bootstrap_keys(tmp_path)["live"]
            await verify_sender_domain(urls[0], key, dns_host)
            async with httpx.AsyncClient(base_url=urls[1]) as http:
                hook = await http.post(
                    "/webhooks",
                    json={"endpoint": receiver.url, "events": ["email.sent"]},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert hook.status_code in (200, 201), hook.text
            cert = tmp_path / CERT_FILENAME
            relay_port = int(base["POSTHASTE_SMTP_RELAY_PORT"])
            await until(lambda: cert.exists(), "the relay's certificate", 60)
            first = Load(urls[0], key, relay_port, cert)
            second = Load(urls[1], key, relay_port, cert)
            second.sent = 1_000_000  # its recipients apart from the first's
            clients = [
                asyncio.create_task(first.rest()),
                asyncio.create_task(second.rest()),
                asyncio.create_task(first.relay()),
            ]

            def accepted() -> dict[str, str]:
                return {**first.accepted, **second.accepted}

            await until(lambda: len(sink.messages) >= 10, "deliveries before the kill", 120)
            workers[0].process.send_signal(signal.SIGKILL)
            target = len(accepted()) + 20
            await until(lambda: len(accepted()) >= target, "emails accepted after the kill", 120)
            first.stop.set()
            second.stop.set()
            await asyncio.gather(*clients)

            statuses = first.http_statuses + second.http_statuses
            assert set(statuses) == {200}, statuses  # the API processes were never touched
            assert set(first.smtp_replies) == {"250"}, first.smtp_replies
            wanted = set(accepted())

            def seen() -> Counter[str]:
                return Counter(r for m in sink.messages for r in m.recipients)

            await until(lambda: wanted <= set(seen()), "every accepted email at the sink", 180)
            assert max(seen()[r] for r in wanted) <= 2
            ids = set(accepted().values())
            await until(lambda: ids <= sent_events(receiver), "every email.sent event", 180)
            twice = sum(1 for r in wanted if seen()[r] == 2)
            print(f"fleet: {len(wanted)} accepted, {twice} delivered twice")
        except BaseException:
            print(log.read_text(errors="replace"))
            raise
        finally:
            await asyncio.gather(*(asyncio.to_thread(p.stop) for p in processes))
