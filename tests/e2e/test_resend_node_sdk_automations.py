"""The official Resend Node SDK's automations and events calls, unchanged, against a real server
(SQLite and PostgreSQL) whose workers run the steps, through the bridge of tests/node_bridge.py.

The Node SDK sends Resend's own config names (``event_name``, ``template: {id, variables}``,
``segment_id``), which Posthaste reads beside its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import RunningServer
from tests.helpers import until
from tests.node_bridge import NodeBridge, running_bridge


@pytest.fixture(scope="module")
def node(server: RunningServer) -> Iterator[NodeBridge]:
    log = server.data_dir / "node-automations.log"
    with running_bridge(server.url, server.test_key, log) as bridge:
        yield bridge


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_automations_events_and_runs(node: NodeBridge) -> None:
    template = node.ok(
        "templates.create",
        {
            "name": "Paid",
            "alias": unique("paid"),
            "subject": "Order {{ event.order }} for {{ contact.first_name }}",
            "html": "<p>Thanks, {{ contact.first_name }} ({{ tier }})</p>",
        },
    )
    segment = node.ok("segments.create", {"name": "Customers"})
    event = unique("order.paid")
    steps: list[dict[str, Any]] = [
        {"key": "start", "type": "trigger", "config": {"eventName": event}},
        {
            "key": "mail",
            "type": "send_email",
            "config": {
                "from": "hi@acme.test",
                "template": {"id": template["id"], "variables": {"tier": "gold"}},
            },
        },
        {"key": "tag", "type": "add_to_segment", "config": {"segmentId": segment["id"]}},
    ]
    connections = [
        {"from": "start", "to": "mail", "type": "default"},
        {"from": "mail", "to": "tag", "type": "default"},
    ]
    created = node.ok(
        "automations.create",
        {"name": "Paid", "status": "enabled", "steps": steps, "connections": connections},
    )
    automation_id = created["id"]
    got = node.ok("automations.get", automation_id)
    assert got["steps"][0]["config"] == {"event": event}
    assert automation_id in [a["id"] for a in node.ok("automations.list", {"limit": 100})["data"]]

    email = f"{unique('ann')}@example.com"
    node.ok("contacts.create", {"email": email, "firstName": "Ann"})
    sent = node.ok("events.send", {"event": event, "email": email, "payload": {"order": "A-9"}})
    assert sent == {"object": "event", "event": event}

    def completed() -> list[Any]:
        runs = node.ok(
            "automations.runs.list", {"automationId": automation_id, "status": "completed"}
        )
        return list(runs["data"])

    [run] = until(completed, "the run to complete")
    detail = node.ok("automations.runs.get", {"automationId": automation_id, "runId": run["id"]})
    assert [s["key"] for s in detail["steps"]] == ["start", "mail", "tag"]
    mail = node.ok("emails.get", detail["steps"][1]["output"]["email_id"])
    assert mail["subject"] == "Order A-9 for Ann"
    members = node.ok("contacts.list", {"segmentId": segment["id"]})
    assert [c["email"] for c in members["data"]] == [email]

    node.ok("automations.update", automation_id, {"name": "Paid orders"})
    assert node.ok("automations.get", automation_id)["name"] == "Paid orders"
    copy = node.ok("automations.duplicate", automation_id)
    assert node.ok("automations.stop", automation_id)["status"] == "disabled"
    for removed in (automation_id, copy["id"]):
        assert node.ok("automations.remove", removed)["deleted"] is True
    missing = node.call("automations.get", automation_id)
    assert missing["error"]["statusCode"] == 404


def test_a_graph_that_cannot_run_is_a_422(node: NodeBridge) -> None:
    answer = node.call(
        "automations.create",
        {
            "name": "Broken",
            "steps": [{"key": "d", "type": "delay", "config": {"duration": "1h"}}],
            "connections": [],
        },
    )
    assert answer["error"]["statusCode"] == 422
    assert "exactly one 'trigger'" in answer["error"]["message"]


def test_events_defined_with_a_schema(node: NodeBridge) -> None:
    name = unique("order.paid")
    schema = {"plan": "string", "total": "number"}
    created = node.ok("events.create", {"name": name, "schema": schema})
    assert created["object"] == "event"
    for ref in (name, created["id"]):
        got = node.ok("events.get", ref)
        assert got["id"] == created["id"] and got["schema"] == schema
    assert created["id"] in [e["id"] for e in node.ok("events.list")["data"]]
    page = node.ok("events.list", {"limit": 1, "after": created["id"]})
    assert page["data"] == [] and page["has_more"] is False
    twice = node.call("events.create", {"name": name})
    assert twice["error"]["statusCode"] == 409

    changed = {**schema, "trial": "boolean"}
    assert node.ok("events.update", name, {"schema": changed})["id"] == created["id"]
    email = f"{unique('bo')}@example.com"
    refused = node.call("events.send", {"event": name, "email": email, "payload": {"trial": 1}})
    assert refused["error"]["statusCode"] == 422
    assert "'payload.trial' must be a boolean" in refused["error"]["message"]
    sent = node.ok("events.send", {"event": name, "email": email, "payload": {"trial": True}})
    assert sent == {"object": "event", "event": name}

    assert node.ok("events.update", created["id"], {"schema": None})["id"] == created["id"]
    removed = node.ok("events.remove", name)
    assert removed == {"object": "event", "id": created["id"], "deleted": True}
    assert node.call("events.get", name)["error"]["statusCode"] == 404
