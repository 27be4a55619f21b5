"""Webhooks and the live stream across a fleet: ``posthaste serve --role api`` and a separate
``--role worker`` process on one database. The worker delivers the email and records its events;
the worker's dispatcher posts them to a real receiver; the API process's stream sees them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import orjson
import pytest
from standardwebhooks import Webhook as StandardWebhook

from tests.conftest import PG_ADMIN_DSN, SECRET, _pg_admin
from tests.e2e.conftest import Serve, _bootstrap_keys, start_serve
from tests.ports import free_port
from tests.webhook_receiver import eventually, running_receiver


@dataclass
class Fleet:
    url: str
    key: str


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    data_dir = tmp_path_factory.mktemp("fleet") / "posthaste-data"
    data_dir.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_HTTP_PORT": str(port),
        "POSTHASTE_WEBHOOK_ALLOW_PRIVATE": "true",  # the receiver is on loopback
        "POSTHASTE_LOG_LEVEL": "warning",
    }
    database = None
    if request.param == "postgres":
        database = f"posthaste_fleet_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        asyncio.run(_pg_admin(f'CREATE DATABASE "{database}"'))
        env["POSTHASTE_DATABASE_URL"] = f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{database}"
        env["POSTHASTE_SECRET_KEY"] = SECRET
    processes: list[Serve] = []
    try:
        api = start_serve(env, "--role", "api", log=data_dir / "api.log", cwd=data_dir.parent)
        processes.append(api)
        worker_log = data_dir / "worker.log"
        processes.append(
            start_serve(env, "--role", "worker", log=worker_log, cwd=data_dir.parent, ready=False)
        )
        lift = ["teams", "update", "default", "--rate-limit", "0"]
        subprocess.run(
            [sys.executable, "-m", "posthaste.cli", *lift],
            env=env,
            check=True,
            capture_output=True,
            cwd=data_dir.parent,
        )
        yield Fleet(api.url, _bootstrap_keys(data_dir)["test"])  # test mode: any from-domain
    finally:
        for process in processes:
            process.stop()
        if database:
            asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


async def _stream_events(fleet: Fleet, wanted: int, opened: asyncio.Event) -> list[dict[str, str]]:
    headers = {"Authorization": f"Bearer {fleet.key}"}
    frames: list[dict[str, str]] = []
    async with (
        httpx.AsyncClient(base_url=fleet.url, timeout=30) as http,
        http.stream("GET", "/events/stream?types=email.delivered", headers=headers) as response,
    ):
        assert response.status_code == 200
        fields: dict[str, str] = {}
        async for line in response.aiter_lines():
            opened.set()
            if line:
                name, _, value = line.partition(":")
                fields[name] = value.strip()
            elif "id" in fields:
                frames.append(fields)
                if len(frames) == wanted:
                    return frames
                fields = {}
            else:
                fields = {}
    return frames


async def test_a_worker_process_delivers_webhooks_and_feeds_the_api_stream(fleet: Fleet) -> None:
    headers = {"Authorization": f"Bearer {fleet.key}"}
    async with running_receiver() as receiver, httpx.AsyncClient(base_url=fleet.url) as http:
        created = await http.post(
            "/webhooks",
            json={"endpoint": receiver.url, "events": ["email.delivered"]},
            headers=headers,
        )
        assert created.status_code == 201, created.text
        opened = asyncio.Event()
        stream = asyncio.create_task(_stream_events(fleet, 1, opened))
        await asyncio.wait_for(opened.wait(), 30)
        sent = await http.post(
            "/emails",
            json={"from": "a@acme.test", "to": "delivered@simulator.test", "subject": "s",
                  "text": "t"},
            headers=headers,
        )  # fmt: skip
        assert sent.status_code == 200, sent.text
        [frame] = await asyncio.wait_for(stream, 60)
        await eventually(lambda: len(receiver.requests) == 1, what="the webhook", within=60)

    email_id = sent.json()["id"]
    assert orjson.loads(frame["data"])["data"]["email_id"] == email_id
    request = receiver.requests[0]
    payload = StandardWebhook(created.json()["secret"]).verify(request.body, request.headers)
    assert payload["type"] == "email.delivered" and payload["data"]["email_id"] == email_id
    assert request.headers["webhook-id"] == frame["id"]
