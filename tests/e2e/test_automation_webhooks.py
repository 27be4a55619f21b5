"""``automation.run.*`` events through webhooks, end to end: a real ``posthaste serve``
(SQLite and PostgreSQL), a webhook endpoint on a real aiohttp receiver, automations triggered
through the API, and every run event received and its Standard Webhooks signature verified with
the ``standardwebhooks`` library."""

from __future__ import annotations

import uuid
from itertools import pairwise
from typing import Any

import httpx
import orjson
import pytest
from standardwebhooks import Webhook as StandardWebhook

from tests.e2e.conftest import RunningServer
from tests.webhook_receiver import Received, eventually, running_receiver

RUN_EVENTS = ["automation.run.started", "automation.run.completed", "automation.run.failed"]


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"POSTHASTE_WEBHOOK_ALLOW_PRIVATE": "true"}  # the receiver is on loopback


def step(key: str, type_: str, **config: Any) -> dict[str, Any]:
    return {"key": key, "type": type_, "config": config}


def automation(event: str, *steps: dict[str, Any]) -> dict[str, Any]:
    """trigger(event) → steps, in a line."""
    keys = ["start", *(s["key"] for s in steps)]
    return {
        "name": event,
        "status": "enabled",
        "steps": [step("start", "trigger", event=event), *steps],
        "connections": [{"from": a, "to": b} for a, b in pairwise(keys)],
    }


def verified(secret: str, requests: list[Received]) -> list[dict[str, Any]]:
    """Each request's payload, its signature checked (raises on a bad one)."""
    return [dict(StandardWebhook(secret).verify(r.body, r.headers)) for r in requests]


async def test_run_events_reach_a_webhook_signed(server: RunningServer) -> None:
    suffix = uuid.uuid4().hex[:8]
    welcome, goodbye = f"welcome.{suffix}", f"goodbye.{suffix}"
    mail = step("mail", "send_email", **{"from": "hi@acme.test", "subject": "Hi", "text": "Hi"})
    async with (
        running_receiver() as receiver,
        httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {server.test_key}"}
        ) as http,
    ):
        hook = await http.post("/webhooks", json={"endpoint": receiver.url, "events": RUN_EVENTS})
        assert hook.status_code == 201, hook.text
        completes = await http.post("/automations", json=automation(welcome, mail))
        fails = await http.post(
            "/automations", json=automation(goodbye, step("bye", "contact_delete"), mail)
        )
        assert completes.status_code == fails.status_code == 201, (completes.text, fails.text)
        ann, bob = f"ann-{suffix}@example.com", f"bob-{suffix}@example.com"
        for event, email in ((welcome, ann), (goodbye, bob)):
            sent = await http.post("/events/send", json={"event": event, "email": email})
            assert sent.status_code == 202, sent.text
        await eventually(lambda: len(receiver.requests) >= 4, within=90, what="four run events")
        contact = (await http.get(f"/contacts/{ann}")).json()

    payloads = verified(hook.json()["secret"], receiver.requests)
    assert len(payloads) == 4
    by_run: dict[str, dict[str, dict[str, Any]]] = {}
    for payload in payloads:
        by_run.setdefault(payload["data"]["automation_id"], {})[payload["type"]] = payload
    done, failed = by_run[completes.json()["id"]], by_run[fails.json()["id"]]
    assert sorted(done) == ["automation.run.completed", "automation.run.started"]
    assert sorted(failed) == ["automation.run.failed", "automation.run.started"]

    started, completed = done["automation.run.started"], done["automation.run.completed"]
    assert started["data"]["object"] == "automation_run"
    assert started["data"]["contact_id"] == completed["data"]["contact_id"] == contact["id"]
    assert started["data"]["id"] == completed["data"]["id"]
    assert started["data"]["status"] == "running" and started["data"]["completed_at"] is None
    assert completed["data"]["status"] == "completed" and completed["data"]["completed_at"]
    assert completed["data"]["started_at"] == started["data"]["started_at"]
    ended = failed["automation.run.failed"]["data"]
    assert ended["status"] == "failed" and ended["error"] == "The run's contact was deleted."

    headers = [{k.lower(): v for k, v in r.headers.items()} for r in receiver.requests]
    assert len({h["webhook-id"] for h in headers}) == 4  # one event, one id
    assert all(h["svix-id"] == h["webhook-id"] for h in headers)
    assert all(orjson.loads(r.body)["type"] in RUN_EVENTS for r in receiver.requests)
