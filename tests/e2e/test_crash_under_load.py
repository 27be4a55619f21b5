"""SIGKILL under load loses nothing: ``posthaste serve`` (the supervised default layout) takes REST
and SMTP relay traffic while the test kills a worker, then the API/relay process, then the
supervisor itself (its children stop with it) and starts it again, and the webhook receiver is
down (503) the whole time. Afterwards every acknowledged email reaches the sink (at most twice:
the documented window of a delivery cut short) and every email.sent event reaches the receiver
once it is back.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from posthaste.smtp.tls import CERT_FILENAME
from tests.conftest import SECRET
from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import _bootstrap_keys, fresh_pg_database
from tests.e2e.load import Load, until, verify_sender_domain
from tests.e2e.test_supervisor import Serve, _ready, children, start
from tests.ports import free_port
from tests.smtp_sink import Sink, running_sink
from tests.webhook_receiver import Receiver, running_receiver


@pytest.fixture
def dns_host() -> Iterator[ZoneServer]:
    yield from running_zone()


@pytest.fixture(params=["sqlite", "postgres"])
def database_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    with fresh_pg_database("posthaste_crash") as url:
        yield {"POSTHASTE_DATABASE_URL": url, "POSTHASTE_SECRET_KEY": SECRET}


async def started(env: dict[str, str]) -> Serve:
    serve = start(env, "--processes", "2")
    await until(lambda: _ready(serve), "the supervised server to answer /readyz", 120)
    return serve


async def replaced(serve: Serve, role: str, killed: int) -> None:
    def done() -> bool:
        live = children(serve.process.pid)
        return killed not in live and role in live.values()

    await until(done, f"a new {role} process", 120)


def sent_events(receiver: Receiver) -> set[str]:
    found = set()
    for request in receiver.requests:
        event = orjson.loads(request.body)
        if event["type"] == "email.sent":
            found.add(event["data"]["email_id"])
    return found


async def test_killed_processes_lose_no_email_and_no_event(
    database_env: dict[str, str], dns_host: ZoneServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "posthaste-data"
    data_dir.mkdir()
    sink = Sink()
    async with running_sink(sink), running_receiver(default_status=503) as receiver:
        env = {
            **os.environ,
            **database_env,
            "POSTHASTE_DATA_DIR": str(data_dir),
            "POSTHASTE_HTTP_PORT": str(free_port()),
            "POSTHASTE_SMTP_RELAY_PORT": str(free_port()),
            "POSTHASTE_SMTP_RELAY_TLS_PORT": str(free_port()),
            "POSTHASTE_SMTP_INBOUND_PORT": str(free_port()),
            "POSTHASTE_DELIVERY": f"smtp://127.0.0.1:{sink.port}?tls=none",
            "POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}",
            "POSTHASTE_DELIVERY_RETRY_SCHEDULE": "1s",
            "POSTHASTE_WEBHOOK_RETRY_SCHEDULE": ",".join(["1s"] + ["3s"] * 60),
            "POSTHASTE_WEBHOOK_JITTER": "0",
            "POSTHASTE_WEBHOOK_ALLOW_PRIVATE": "true",
            "POSTHASTE_JOB_LEASE": "2s",  # a killed worker's jobs wait out their lease
            "POSTHASTE_LOG_LEVEL": "warning",
        }
        env.pop("POSTHASTE_PROCESSES", None)
        serve = await started(env)
        try:
            key = _bootstrap_keys(data_dir)["live"]
            await verify_sender_domain(serve.url, key, dns_host)
            async with httpx.AsyncClient(base_url=serve.url) as http:
                hook = await http.post(
                    "/webhooks",
                    json={"endpoint": receiver.url, "events": ["email.sent"]},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert hook.status_code in (200, 201), hook.text
            relay_port = int(env["POSTHASTE_SMTP_RELAY_PORT"])
            load = Load(serve.url, key, relay_port, data_dir / CERT_FILENAME)
            clients = [asyncio.create_task(c()) for c in (load.rest, load.rest, load.relay)]

            async def progress(more: int, what: str) -> None:
                target = len(load.accepted) + more
                await until(lambda: len(load.accepted) >= target, what, 120)

            await progress(10, "emails accepted before the first kill")
            for role in ("worker", "api,smtp,inbound"):
                killed = serve.pid_of(role)
                os.kill(killed, signal.SIGKILL)
                await replaced(serve, role, killed)
                await progress(5, f"emails accepted after the {role} process was killed")
            family = list(children(serve.process.pid))
            serve.process.kill()  # the supervisor: its children stop with it
            await asyncio.to_thread(serve.process.wait, 30)
            await until(lambda: not children(serve.process.pid), "the children to stop", 60)
            assert family
            serve = await started(env)
            await progress(5, "emails accepted after the restart")
            load.stop.set()
            await asyncio.gather(*clients)

            print(
                f"accepted {len(load.accepted)}; HTTP {dict(load.http_statuses)}; "
                f"relay {dict(load.smtp_replies)}"
            )
            assert set(load.http_statuses) <= {200, 503, -1}  # -1: cut off by a kill
            assert all(reply[0] in "24" or reply == "dropped" for reply in load.smtp_replies)
            wanted = set(load.accepted)

            def seen() -> Counter[str]:
                return Counter(r for m in sink.messages for r in m.recipients)

            await until(lambda: wanted <= set(seen()), "every accepted email at the sink", 180)
            assert max(seen()[r] for r in wanted) <= 2
            receiver.default_status = 200  # the receiver is back
            ids = set(load.accepted.values())
            await until(lambda: ids <= sent_events(receiver), "every email.sent event", 180)
            print(f"sink duplicates: {sum(1 for r in wanted if seen()[r] == 2)}")
        except BaseException:
            print(serve.output())
            raise
        finally:
            if serve.process.poll() is None:
                serve.stop()
