"""The official Resend Node SDK's contacts, segments and topics calls against a real server
(SQLite and PostgreSQL), through the bridge of tests/node_bridge.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from posthaste.core.ids import format_ms, now_ms
from tests.e2e.conftest import RunningServer
from tests.helpers import until
from tests.node_bridge import NodeBridge, running_bridge


@pytest.fixture(scope="module")
def node(server: RunningServer) -> Iterator[NodeBridge]:
    with running_bridge(server.url, server.test_key, server.data_dir / "node-audiences.log") as n:
        yield n


def address(name: str) -> str:
    """A fresh address: the module's server keeps its data between tests."""
    return f"{name}-{uuid.uuid4().hex[:8]}@example.com"


def test_contacts(node: NodeBridge) -> None:
    email = address("ann")
    created = node.ok(
        "contacts.create",
        {"email": email, "firstName": "Ann", "properties": {"plan": "pro", "seats": 2}},
    )
    contact_id = created["id"]
    assert node.ok("contacts.get", contact_id)["email"] == email
    got = node.ok("contacts.get", {"email": email.upper()})
    assert got["id"] == contact_id and got["properties"] == {"plan": "pro", "seats": 2}
    node.ok("contacts.update", {"email": email, "lastName": "Lee", "unsubscribed": True})
    node.ok("contacts.update", {"id": contact_id, "properties": {"seats": 3}})
    got = node.ok("contacts.get", {"id": contact_id})
    assert (got["first_name"], got["last_name"], got["unsubscribed"]) == ("Ann", "Lee", True)
    assert got["properties"] == {"plan": "pro", "seats": 3}
    listed = node.ok("contacts.list", {"limit": 100})
    assert contact_id in [c["id"] for c in listed["data"]]
    taken = node.call("contacts.create", {"email": email.upper()})
    assert taken["error"]["statusCode"] == 409 and taken["error"]["name"] == "conflict"
    removed = node.ok("contacts.remove", {"email": email})
    assert removed["id"] == contact_id and removed["deleted"] is True
    assert node.call("contacts.get", contact_id)["error"]["statusCode"] == 404


def test_segments_and_memberships(node: NodeBridge) -> None:
    segment_id = node.ok("segments.create", {"name": "Newsletter"})["id"]
    node.ok("segments.update", segment_id, {"name": "Weekly"})
    assert node.ok("segments.get", segment_id)["name"] == "Weekly"
    assert segment_id in [s["id"] for s in node.ok("segments.list")["data"]]
    ann = node.ok("contacts.create", {"email": address("ann"), "segments": [{"id": segment_id}]})
    bob_email = address("bob")
    bob = node.ok("contacts.create", {"email": bob_email})
    node.ok("contacts.segments.add", {"email": bob_email, "segmentId": segment_id})
    node.ok("contacts.segments.add", {"contactId": bob["id"], "segmentId": segment_id})
    members = node.ok("contacts.list", {"segmentId": segment_id})
    assert [c["id"] for c in members["data"]] == [ann["id"], bob["id"]]
    of_bob = node.ok("contacts.segments.list", {"contactId": bob["id"]})
    assert [s["id"] for s in of_bob["data"]] == [segment_id]
    node.ok("contacts.segments.remove", {"email": bob_email, "segmentId": segment_id})
    members = node.ok("contacts.list", {"segmentId": segment_id})
    assert [c["id"] for c in members["data"]] == [ann["id"]]
    assert node.ok("segments.remove", segment_id)["deleted"] is True
    assert node.ok("contacts.get", ann["id"])["id"] == ann["id"]


def test_topics_and_a_contacts_subscriptions(node: NodeBridge) -> None:
    news = node.ok("topics.create", {"name": "News", "defaultSubscription": "opt_in"})
    offers = node.ok(
        "topics.create", {"name": "Offers", "defaultSubscription": "opt_out", "description": "x"}
    )
    node.ok("topics.update", {"id": offers["id"], "description": "Now and then"})
    assert node.ok("topics.get", offers["id"])["description"] == "Now and then"
    assert {news["id"], offers["id"]} <= {t["id"] for t in node.ok("topics.list")["data"]}
    email = address("cat")
    cat = node.ok(
        "contacts.create",
        {"email": email, "topics": [{"id": offers["id"], "subscription": "opt_in"}]},
    )
    node.ok(
        "contacts.topics.update",
        {"id": cat["id"], "topics": [{"id": news["id"], "subscription": "opt_out"}]},
    )
    listed = node.ok("contacts.topics.list", {"email": email})
    mine = {t["id"]: t["subscription"] for t in listed["data"]}
    assert mine[news["id"]] == "opt_out" and mine[offers["id"]] == "opt_in"
    assert node.ok("topics.remove", offers["id"])["deleted"] is True


def test_contact_imports(node: NodeBridge) -> None:
    segment = node.ok("segments.create", {"name": "Imported by Node"})
    good = address("imp")
    csv = f"email,first_name,plan\n{good},Imp,pro\nnot-an-address,Bad,free\n"
    started = node.ok(
        "contacts.imports.create",
        {"file": csv, "onConflict": "skip", "segments": [{"id": segment["id"]}]},
    )
    assert started["object"] == "contact_import"
    done = until(
        lambda: (
            (got := node.ok("contacts.imports.get", started["id"]))["status"] == "completed" and got
        ),
        "the import to complete",
    )
    assert done["counts"] == {"total": 2, "created": 1, "updated": 0, "skipped": 0, "failed": 1}
    assert node.ok("contacts.get", {"email": good})["properties"] == {"plan": "pro"}
    listed = node.ok("contacts.imports.list", {"limit": 5})
    assert started["id"] in [i["id"] for i in listed["data"]]


def test_broadcasts(node: NodeBridge) -> None:
    segment_id = node.ok("segments.create", {"name": "Readers"})["id"]
    node.ok("contacts.create", {"email": address("ann"), "segments": [{"id": segment_id}]})
    created = node.ok(
        "broadcasts.create",
        {
            "from": "News <news@example.com>",
            "segmentId": segment_id,
            "subject": "Hello {{contact.first_name}}",
            "text": "Stop: {{unsubscribe_url}}",
            "previewText": "This week",
        },
    )
    broadcast_id = created["id"]
    node.ok("broadcasts.update", broadcast_id, {"name": "Weekly", "replyTo": "me@example.com"})
    got = node.ok("broadcasts.get", broadcast_id)
    assert (got["name"], got["reply_to"], got["status"]) == ("Weekly", ["me@example.com"], "draft")
    assert broadcast_id in [b["id"] for b in node.ok("broadcasts.list", {"limit": 100})["data"]]
    later = format_ms(now_ms() + 3_600_000)
    node.ok("broadcasts.send", broadcast_id, {"scheduledAt": later})
    assert node.ok("broadcasts.get", broadcast_id)["status"] == "scheduled"
    node.ok("broadcasts.cancel", broadcast_id)
    assert node.ok("broadcasts.get", broadcast_id)["status"] == "cancelled"
    refused = node.call("broadcasts.remove", broadcast_id)
    assert refused["error"]["statusCode"] == 409

    draft = node.ok(
        "broadcasts.create",
        {"from": "news@example.com", "segmentId": segment_id, "subject": "S", "text": "T"},
    )
    assert node.ok("broadcasts.remove", draft["id"])["deleted"] is True
    now = node.ok(
        "broadcasts.create",
        {"from": "news@example.com", "audienceId": segment_id, "subject": "S", "html": "<p>T</p>",
         "send": True},
    )  # fmt: skip
    assert node.ok("broadcasts.get", now["id"])["status"] in ("sending", "sent")
