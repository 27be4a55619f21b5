"""The official ``resend`` Python SDK's automations and events calls, unchanged, against a real
Posthaste server (SQLite and PostgreSQL) whose workers run the steps."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import resend
import resend.exceptions

from tests.e2e.conftest import RunningServer
from tests.helpers import until


@pytest.fixture
def sdk(server: RunningServer) -> Iterator[RunningServer]:
    previous = (resend.api_key, resend.api_url)
    resend.api_key, resend.api_url = server.test_key, server.url
    yield server
    resend.api_key, resend.api_url = previous


def graph(event: str) -> dict[str, Any]:
    return {
        "steps": [
            {"key": "start", "type": "trigger", "config": {"event": event}},
            {
                "key": "mail",
                "type": "send_email",
                "config": {
                    "from": "hi@acme.test",
                    "subject": "Order {{event.order}}",
                    "text": "Thanks, {{contact.first_name}}",
                },
            },
        ],
        "connections": [{"from": "start", "to": "mail", "type": "default"}],
    }


def test_automations_crud_events_and_runs(sdk: RunningServer) -> None:
    event = f"order.paid.{uuid.uuid4().hex[:8]}"
    created = resend.Automations.create({"name": "Orders", "status": "enabled", **graph(event)})
    automation_id = created["id"]
    assert created["object"] == "automation"
    got = resend.Automations.get(automation_id)
    assert got["status"] == "enabled" and [s["key"] for s in got["steps"]] == ["start", "mail"]
    listed = resend.Automations.list({"status": "enabled"})
    assert automation_id in [a["id"] for a in listed["data"]]

    email = f"ann-{uuid.uuid4().hex[:8]}@example.com"
    resend.Contacts.create({"email": email, "first_name": "Ann"})
    sent = resend.Events.send({"event": event, "email": email, "payload": {"order": "A-17"}})
    assert sent["event"] == event

    def completed() -> list[Any]:
        return list(resend.Automations.Runs.list(automation_id, {"status": "completed"})["data"])

    [run] = until(completed, "the run to complete")
    detail = resend.Automations.Runs.get(automation_id, run["id"])
    assert detail["object"] == "automation_run" and detail["status"] == "completed"
    mail = next(s for s in detail["steps"] if s["key"] == "mail")
    email_record = resend.Emails.get(mail["output"]["email_id"])
    assert email_record["subject"] == "Order A-17" and email_record["to"] == [email]

    renamed = resend.Automations.update({"automation_id": automation_id, "name": "Paid orders"})
    assert renamed["id"] == automation_id
    copy = resend.Automations.duplicate(automation_id)
    assert resend.Automations.get(copy["id"])["status"] == "disabled"
    stopped = resend.Automations.stop(automation_id)
    assert stopped["status"] == "disabled"
    for removed_id in (automation_id, copy["id"]):
        assert resend.Automations.remove(removed_id)["deleted"] is True
    with pytest.raises(resend.exceptions.ResendError):
        resend.Automations.get(automation_id)


def test_a_graph_that_cannot_run_is_refused(sdk: RunningServer) -> None:
    body = graph("x")
    body["connections"] = []
    with pytest.raises(resend.exceptions.ResendError, match="not reachable"):
        resend.Automations.create({"name": "Broken", **body})


def test_events_defined_with_a_schema(sdk: RunningServer) -> None:
    name = f"order.paid.{uuid.uuid4().hex[:8]}"
    created = resend.Events.create({"name": name, "schema": {"plan": "string", "total": "number"}})
    assert created["object"] == "event"
    for ref in (name, created["id"]):
        got = resend.Events.get(ref)
        assert got["id"] == created["id"] and got["schema"] == {"plan": "string", "total": "number"}
    listed = resend.Events.list({"limit": 100})
    assert created["id"] in [e["id"] for e in listed["data"]] and listed["has_more"] is False
    with pytest.raises(resend.exceptions.ResendError, match="already defined"):
        resend.Events.create({"name": name})

    schema: dict[str, Any] = {"plan": "string", "total": "number", "paid_at": "date"}
    updated = resend.Events.update({"identifier": name, "schema": schema})
    assert updated["id"] == created["id"] and resend.Events.get(name)["schema"] == schema
    email = f"bo-{uuid.uuid4().hex[:8]}@example.com"
    with pytest.raises(resend.exceptions.ResendError, match=r"'payload\.total' must be a number"):
        resend.Events.send({"event": name, "email": email, "payload": {"total": "ten"}})
    good = {"total": 10.5, "paid_at": "2026-11-27T10:00:00Z"}
    assert resend.Events.send({"event": name, "email": email, "payload": good})["event"] == name

    assert resend.Events.update({"identifier": created["id"], "schema": None})["id"]
    assert resend.Events.get(name)["schema"] is None
    removed = resend.Events.remove(name)
    assert (removed["object"], removed["id"], removed["deleted"]) == ("event", created["id"], True)
    with pytest.raises(resend.exceptions.ResendError, match="was not found"):
        resend.Events.get(created["id"])
