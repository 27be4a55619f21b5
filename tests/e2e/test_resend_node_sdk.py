"""The official Resend Node SDK (``resend`` on npm, pinned in tests/node) against a real server.

Every method of the SDK on the resources Posthaste has (emails and their attachments, batch,
templates, domains and their claims, webhooks and their events, API keys, suppressions) is called
through one long-lived Node process per server, and what it returns is asserted, then read back.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import RunningServer
from tests.helpers import until
from tests.node_bridge import NodeBridge, buffer, require_node, running_bridge
from tests.webhook_receiver import eventually, running_receiver

PDF = b"%PDF-1.7\n" + bytes(range(256))
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture(scope="module")
def node_available() -> None:
    require_node()  # before the module's server starts


@pytest.fixture(scope="module")
def dns_host() -> Iterator[ZoneServer]:
    """The DNS host the test publishes a domain's records at."""
    yield from running_zone()


@pytest.fixture(scope="module")
def server_env(dns_host: ZoneServer) -> dict[str, str]:
    return {
        "POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}",
        "POSTHASTE_WEBHOOK_ALLOW_PRIVATE": "true",  # the webhook receiver is on loopback
    }


@pytest.fixture(scope="module")
def node(node_available: None, server: RunningServer) -> Iterator[NodeBridge]:
    """``new Resend(test key)`` with ``RESEND_BASE_URL`` set to the server."""
    with running_bridge(server.url, server.test_key, server.data_dir / "node-bridge.log") as node:
        yield node


def in_days(days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat(timespec="milliseconds")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def record_of(node: NodeBridge, email_id: str, status: str) -> dict[str, Any]:
    """``emails.get`` until the email has ``status`` (bounded)."""

    def reached() -> dict[str, Any] | None:
        record: dict[str, Any] = node.ok("emails.get", email_id)
        return record if record["status"] == status else None

    return until(reached, f"email {email_id} to be {status}", seconds=15)


def failed(answer: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``error`` of an answer that must have failed."""
    assert answer["data"] is None, answer
    error: dict[str, Any] = answer["error"]
    return error


def publish(dns_host: ZoneServer, records: list[dict[str, Any]]) -> None:
    for record in records:
        if record["type"] == "TXT":
            dns_host.add(record["name"], "TXT", record["value"])
        else:
            dns_host.add(record["name"], record["type"], (record["priority"], record["value"]))


# Emails


def test_send_get_and_create(node: NodeBridge) -> None:
    sent = node.call(
        "emails.send",
        {
            "from": "Acme <hello@acme.test>",
            "to": ["delivered@simulator.test"],
            "cc": "cc@example.com",
            "bcc": ["bcc@example.com"],
            "replyTo": "replies@acme.test",
            "subject": "Hello from Node",
            "html": "<strong>it works</strong>",
            "text": "it works",
            "headers": {"X-Entity-Ref-ID": "42"},
            "tags": [{"name": "campaign", "value": "node"}],
        },
    )
    assert sent["error"] is None and sent["data"]["status"] == "queued"
    assert sent["headers"]["content-type"] == "application/json"
    record = record_of(node, sent["data"]["id"], "delivered")
    assert record["object"] == "email" and record["id"] == sent["data"]["id"]
    assert (record["from"], record["to"], record["cc"], record["bcc"], record["reply_to"]) == (
        "Acme <hello@acme.test>",
        ["delivered@simulator.test"],
        ["cc@example.com"],
        ["bcc@example.com"],
        ["replies@acme.test"],
    )
    assert (record["subject"], record["html"], record["text"]) == (
        "Hello from Node",
        "<strong>it works</strong>",
        "it works",
    )
    assert record["headers"] == {"X-Entity-Ref-ID": "42"}
    assert record["tags"] == {"campaign": "node"}  # SPEC's object (Resend answers a list)
    assert record["last_event"] == "email.delivered" and record["message_id"].startswith("<")

    created = node.ok(
        "emails.create",
        {"from": "hello@acme.test", "to": "a@example.com", "subject": "c", "text": "t"},
    )
    assert node.ok("emails.get", created["id"])["subject"] == "c"


def test_list_pages_with_limit_after_and_before(node: NodeBridge) -> None:
    ids = [
        node.ok(
            "emails.send",
            {"from": "hello@acme.test", "to": "a@example.com", "subject": f"page {i}", "text": "t"},
        )["id"]
        for i in range(3)
    ]
    newest_first = ids[::-1]
    first = node.ok("emails.list", {"limit": 2})
    assert first["object"] == "list" and first["has_more"] is True
    assert [e["id"] for e in first["data"]] == newest_first[:2]
    after = node.ok("emails.list", {"limit": 2, "after": newest_first[1]})
    assert after["data"][0]["id"] == newest_first[2]
    before = node.ok("emails.list", {"limit": 2, "before": newest_first[2]})
    assert [e["id"] for e in before["data"]] == newest_first[:2] and before["has_more"] is False
    assert {e["id"] for e in node.ok("emails.list")["data"]} >= set(ids)


def test_scheduled_send_update_and_cancel(node: NodeBridge) -> None:
    later = in_days(2)
    sent = node.ok(
        "emails.send",
        {
            "from": "hello@acme.test",
            "to": "a@example.com",
            "subject": "later",
            "text": "t",
            "scheduledAt": later,
        },
    )
    assert sent["status"] == "scheduled"
    assert node.ok("emails.get", sent["id"])["scheduled_at"] == later.replace("+00:00", "Z")

    moved_to = in_days(3)
    updated = node.ok("emails.update", {"id": sent["id"], "scheduledAt": moved_to})
    assert updated["object"] == "email" and updated["id"] == sent["id"]
    record = node.ok("emails.get", sent["id"])
    assert record["status"] == "scheduled" and record["scheduled_at"] == moved_to.replace(
        "+00:00", "Z"
    )

    canceled = node.ok("emails.cancel", sent["id"])
    assert canceled["object"] == "email" and canceled["id"] == sent["id"]
    assert node.ok("emails.get", sent["id"])["status"] == "canceled"
    again = failed(node.call("emails.update", {"id": sent["id"], "scheduledAt": in_days(4)}))
    assert (again["statusCode"], again["name"]) == (409, "conflict")


def test_attachments_as_buffer_and_base64(node: NodeBridge, server: RunningServer) -> None:
    sent = node.ok(
        "emails.send",
        {
            "from": "hello@acme.test",
            "to": "a@example.com",
            "subject": "files",
            "html": '<img src="cid:logo">',
            "attachments": [
                {"filename": "invoice.pdf", "content": buffer(PDF)},  # no contentType
                {
                    "filename": "logo.png",
                    "content": buffer(PNG).pop("$buffer"),  # a base64 string
                    "contentType": "image/png",
                    "contentId": "logo",
                },
            ],
        },
    )
    listed = node.ok("emails.attachments.list", {"emailId": sent["id"]})
    assert listed["object"] == "list" and listed["has_more"] is False
    by_name = {a["filename"]: a for a in listed["data"]}
    pdf, png = by_name["invoice.pdf"], by_name["logo.png"]
    assert (pdf["content_type"], pdf["size"], pdf["content_disposition"]) == (
        "application/pdf",
        len(PDF),
        "attachment",
    )
    assert (png["content_type"], png["content_id"], png["content_disposition"]) == (
        "image/png",
        "logo",
        "inline",
    )
    assert httpx.get(pdf["download_url"]).content == PDF  # the signed link needs no key
    assert httpx.get(png["download_url"]).content == PNG
    page = node.ok("emails.attachments.list", {"emailId": sent["id"], "limit": 1})
    assert len(page["data"]) == 1 and page["has_more"] is True
    fetched = failed(
        node.call(
            "emails.send",
            {
                "from": "hello@acme.test",
                "to": "a@example.com",
                "subject": "remote",
                "text": "t",
                "attachments": [{"filename": "a.pdf", "path": "https://example.com/a.pdf"}],
            },
        )
    )
    assert fetched["name"] == "validation_error" and "path" in fetched["message"]


def test_attachments_get(node: NodeBridge) -> None:
    sent = node.ok(
        "emails.send",
        {
            "from": "hello@acme.test",
            "to": "a@example.com",
            "subject": "one file",
            "text": "t",
            "attachments": [{"filename": "invoice.pdf", "content": buffer(PDF)}],
        },
    )
    (listed,) = node.ok("emails.attachments.list", {"emailId": sent["id"]})["data"]
    got = node.ok("emails.attachments.get", {"emailId": sent["id"], "id": listed["id"]})
    assert got["object"] == "attachment" and got["id"] == listed["id"]
    assert (got["filename"], got["content_type"], got["size"]) == (
        "invoice.pdf",
        "application/pdf",
        len(PDF),
    )
    assert httpx.get(got["download_url"]).content == PDF


def test_idempotency_key_on_send(node: NodeBridge) -> None:
    body = {"from": "hello@acme.test", "to": "a@example.com", "subject": "once", "text": "t"}
    key = {"idempotencyKey": unique("order")}
    first = node.ok("emails.send", body, key)
    assert node.ok("emails.send", body, key)["id"] == first["id"]
    other = failed(node.call("emails.send", {**body, "subject": "twice"}, key))
    assert (other["statusCode"], other["name"]) == (409, "invalid_idempotent_request")
    too_long = failed(node.call("emails.send", body, {"idempotencyKey": "k" * 257}))
    assert (too_long["statusCode"], too_long["name"]) == (400, "invalid_idempotency_key")


def test_batch_send_and_create(node: NodeBridge) -> None:
    items = [
        {"from": "hello@acme.test", "to": ["a@example.com"], "subject": "one", "text": "1"},
        {"from": "hello@acme.test", "to": "b@example.com", "subject": "two", "html": "<p>2</p>"},
    ]
    result = node.ok("batch.send", items)
    ids = [entry["id"] for entry in result["data"]]
    assert [entry["index"] for entry in result["data"]] == [0, 1] and all(ids)
    assert [node.ok("emails.get", i)["subject"] for i in ids] == ["one", "two"]
    created = node.ok("batch.create", items[:1])
    assert node.ok("emails.get", created["data"][0]["id"])["subject"] == "one"


def test_batch_items_fail_on_their_own(node: NodeBridge) -> None:
    items = [
        {"from": "hello@acme.test", "to": "a@example.com", "subject": "good", "text": "1"},
        {"from": "hello@acme.test", "to": "not-an-address", "subject": "bad", "text": "2"},
    ]
    # The SDK asks for Resend's 'strict' validation by default; each item stands alone here.
    strict = node.ok("batch.send", items)
    good, bad = strict["data"]
    assert node.ok("emails.get", good["id"])["subject"] == "good"
    assert bad["index"] == 1 and bad["error"]["name"] == "validation_error" and "id" not in bad
    permissive = node.ok("batch.send", items, {"batchValidation": "permissive"})
    assert permissive["data"][1]["error"]["name"] == "validation_error"
    assert permissive["errors"] == [{"index": 1, "message": bad["error"]["message"]}]


def test_batch_ignores_the_idempotency_key(node: NodeBridge) -> None:
    items = [{"from": "hello@acme.test", "to": "a@example.com", "subject": "b", "text": "1"}]
    key = {"idempotencyKey": unique("batch")}
    first = node.ok("batch.send", items, key)["data"][0]["id"]
    second = node.ok("batch.send", items, key)["data"][0]["id"]
    assert first != second  # batch items have no idempotency keys


def test_send_with_a_template(node: NodeBridge) -> None:
    alias = unique("shipped")
    created = node.ok(
        "templates.create",
        {
            "name": "Order shipped",
            "alias": alias,
            "subject": "Order {{ ORDER_ID }} shipped",
            "html": "<p>Hi {{ NAME }}, {{ ITEMS }} item(s)</p>",
            "text": "Hi {{ NAME }}",
            "variables": [
                {"key": "NAME", "type": "string", "fallbackValue": "there"},
                {"key": "ORDER_ID", "type": "string"},
                {"key": "ITEMS", "type": "number", "fallbackValue": 1},
            ],
        },
        then="publish",
    )
    assert created["status"] == "published"
    by_alias = node.ok(
        "emails.send",
        {
            "from": "Shop <orders@acme.test>",
            "to": "delivered@simulator.test",
            "template": {"id": alias, "variables": {"ORDER_ID": "A-17", "NAME": "<Ann>"}},
        },
    )
    record = record_of(node, by_alias["id"], "delivered")
    assert record["template_id"] == created["id"] and record["subject"] == "Order A-17 shipped"
    assert record["html"] == "<p>Hi &lt;Ann&gt;, 1 item(s)</p>" and record["text"] == "Hi <Ann>"
    by_id = node.ok(
        "emails.send",
        {
            "from": "orders@acme.test",
            "to": "a@example.com",
            "template": {"id": created["id"], "variables": {"ORDER_ID": 9, "ITEMS": 3}},
        },
    )
    assert node.ok("emails.get", by_id["id"])["html"] == "<p>Hi there, 3 item(s)</p>"
    missing = failed(
        node.call(
            "emails.send",
            {"from": "orders@acme.test", "to": "a@example.com", "template": {"id": alias}},
        )
    )
    assert missing["name"] == "validation_error" and "ORDER_ID" in missing["message"]


def test_errors_come_back_in_the_sdk_shape(node: NodeBridge) -> None:
    invalid = failed(
        node.call(
            "emails.send",
            {"from": "hello@acme.test", "to": ["not-an-address"], "subject": "x", "text": "y"},
        )
    )
    assert (invalid["statusCode"], invalid["name"]) == (422, "validation_error")
    assert "to" in invalid["message"]
    bad_key = failed(node.call("emails.list", key="ph_test_" + "0" * 32))
    assert (bad_key["statusCode"], bad_key["name"]) == (403, "invalid_api_key")
    not_a_key = failed(node.call("emails.list", key="re_123"))
    assert not_a_key["name"] == "invalid_api_key"
    unknown = failed(node.call("emails.get", str(uuid.uuid4())))
    assert (unknown["statusCode"], unknown["name"]) == (404, "not_found")


def test_live_key_from_an_unverified_domain_is_refused(
    node: NodeBridge, server: RunningServer
) -> None:
    answer = node.call(
        "emails.send",
        {"from": "hello@unverified.test", "to": "a@example.com", "subject": "x", "text": "y"},
        key=server.live_key,
    )
    assert (failed(answer)["statusCode"], failed(answer)["name"]) == (403, "domain_not_verified")


# Templates


def test_templates_create_get_update_publish_duplicate_remove(node: NodeBridge) -> None:
    alias = unique("welcome")
    created = node.ok(
        "templates.create",
        {
            "name": "Welcome",
            "alias": alias,
            "subject": "Hi {{ NAME }}",
            "html": "<p>Hi {{ NAME }}</p>",
            "text": "Hi {{ NAME }}",
            "variables": [{"key": "NAME", "type": "string", "fallbackValue": "friend"}],
        },
    )
    assert created["object"] == "template" and created["status"] == "draft"
    got = node.ok("templates.get", created["id"])
    assert node.ok("templates.get", alias)["id"] == created["id"]
    assert (got["name"], got["alias"], got["subject"], got["text"]) == (
        "Welcome",
        alias,
        "Hi {{ NAME }}",
        "Hi {{ NAME }}",
    )
    assert got["variables"] == [{"key": "NAME", "type": "string", "fallback_value": "friend"}]

    updated = node.ok(
        "templates.update",
        alias,
        {
            "name": "Welcome v2",
            "subject": "Hello {{ NAME }} ({{ N }})",
            "variables": [
                {"key": "NAME", "type": "string", "fallbackValue": "you"},
                {"key": "N", "type": "number", "fallbackValue": 2},
            ],
        },
    )
    assert updated["object"] == "template" and updated["id"] == created["id"]
    got = node.ok("templates.get", created["id"])
    assert got["name"] == "Welcome v2" and got["subject"] == "Hello {{ NAME }} ({{ N }})"
    assert {v["key"]: v["fallback_value"] for v in got["variables"]} == {"NAME": "you", "N": 2}

    published = node.ok("templates.publish", created["id"])
    assert published["id"] == created["id"]
    got = node.ok("templates.get", created["id"])
    assert got["status"] == "published" and got["published_at"]

    copy = node.ok("templates.duplicate", alias)
    assert copy["object"] == "template" and copy["id"] != created["id"]
    assert node.ok("templates.get", copy["id"])["alias"] == f"{alias}-copy"
    published_copy = node.ok("templates.duplicate", alias, then="publish")
    assert node.ok("templates.get", published_copy["id"])["status"] == "published"

    removed = node.ok("templates.remove", copy["id"])
    assert removed == {"object": "template", "id": copy["id"], "deleted": True}
    gone = failed(node.call("templates.get", copy["id"]))
    assert (gone["statusCode"], gone["name"]) == (404, "not_found")
    taken = failed(node.call("templates.create", {"name": "x", "alias": alias, "html": "x"}))
    assert (taken["statusCode"], taken["name"]) == (409, "conflict")


def test_templates_list_pages(node: NodeBridge) -> None:
    ids = [node.ok("templates.create", {"name": f"p{i}", "html": "x"})["id"] for i in range(3)]
    everything = node.ok("templates.list")
    assert everything["has_more"] is False and [t["id"] for t in everything["data"]][-3:] == ids
    after = node.ok("templates.list", {"after": ids[0], "limit": 1})
    assert [t["id"] for t in after["data"]] == [ids[1]] and after["has_more"] is True
    last = node.ok("templates.list", {"after": ids[1], "limit": 5})
    assert [t["id"] for t in last["data"]] == [ids[2]] and last["has_more"] is False
    before = node.ok("templates.list", {"before": ids[2], "limit": 1})
    assert [t["id"] for t in before["data"]] == [ids[1]] and before["has_more"] is True


# Domains


def test_domains_create_get_update_verify_remove(
    node: NodeBridge, server: RunningServer, dns_host: ZoneServer
) -> None:
    name = f"{unique('node')}.test"
    created = node.ok(
        "domains.create",
        {"name": name, "region": "eu-west-1", "openTracking": True, "tls": "enforced"},
    )
    assert (created["object"], created["name"], created["status"], created["region"]) == (
        "domain",
        name,
        "not_started",
        "eu-west-1",
    )
    assert (created["open_tracking"], created["click_tracking"], created["tls"]) == (
        True,
        False,
        "enforced",
    )
    assert {r["record"] for r in created["records"]} >= {"DKIM", "SPF"}
    assert node.ok("domains.get", created["id"])["name"] == name

    updated = node.ok(
        "domains.update",
        {"id": created["id"], "openTracking": False, "clickTracking": True, "tls": "opportunistic"},
    )
    assert updated["object"] == "domain" and updated["id"] == created["id"]
    got = node.ok("domains.get", created["id"])
    assert (got["open_tracking"], got["click_tracking"], got["tls"]) == (
        False,
        True,
        "opportunistic",
    )

    pending = node.ok("domains.verify", created["id"])
    assert pending["object"] == "domain" and pending["id"] == created["id"]
    assert node.ok("domains.get", created["id"])["status"] != "verified"
    publish(dns_host, created["records"])
    node.ok("domains.verify", created["id"])
    assert node.ok("domains.get", created["id"])["status"] == "verified"
    live = node.ok(
        "emails.send",
        {"from": f"hi@{name}", "to": "delivered@simulator.test", "subject": "s", "text": "t"},
        key=server.live_key,
    )
    assert record_of(node, live["id"], "delivered")["region"] == "eu-west-1"

    removed = node.ok("domains.remove", created["id"])
    assert removed == {"object": "domain", "id": created["id"], "deleted": True}
    gone = failed(node.call("domains.get", created["id"]))
    assert (gone["statusCode"], gone["name"]) == (404, "not_found")
    wrong_region = failed(node.call("domains.create", {"name": name, "region": "mars-1"}))
    assert (wrong_region["statusCode"], wrong_region["name"]) == (422, "validation_error")


def test_domains_receiving_through_capabilities(node: NodeBridge) -> None:
    created = node.ok(
        "domains.create",
        {"name": f"{unique('in')}.test", "capabilities": {"receiving": "enabled"}},
    )
    assert created["capabilities"] == {"sending": "enabled", "receiving": "enabled"}
    assert created["receiving"] is True
    assert "Receiving" in {r["record"] for r in created["records"]}
    node.ok("domains.update", {"id": created["id"], "capabilities": {"receiving": "disabled"}})
    got = node.ok("domains.get", created["id"])
    assert got["capabilities"]["receiving"] == "disabled" and got["receiving"] is False


def test_domains_list_pages(node: NodeBridge) -> None:
    ids = [node.ok("domains.create", {"name": f"{unique('list')}.test"})["id"] for _ in range(3)]
    newest_first = ids[::-1]
    everything = node.ok("domains.list")
    assert everything["has_more"] is False
    assert [d["id"] for d in everything["data"]][:3] == newest_first
    first = node.ok("domains.list", {"limit": 2})
    assert [d["id"] for d in first["data"]] == newest_first[:2] and first["has_more"] is True
    after = node.ok("domains.list", {"limit": 1, "after": newest_first[0]})
    assert [d["id"] for d in after["data"]] == [newest_first[1]] and after["has_more"] is True
    before = node.ok("domains.list", {"limit": 5, "before": newest_first[1]})
    assert [d["id"] for d in before["data"]] == [newest_first[0]] and before["has_more"] is False


def test_domain_claims(node: NodeBridge, dns_host: ZoneServer) -> None:
    name = f"{unique('claim')}.test"
    claim = node.ok("domains.claims.create", {"name": name, "region": "us-east-1"})
    assert claim["object"] == "domain_claim" and claim["name"] == name
    assert claim["status"] == "pending" and claim["record"]["type"] == "TXT"
    domain = node.ok("domains.get", claim["domain_id"])
    assert domain["name"] == name and domain["claimed"] is False
    assert node.ok("domains.claims.get", claim["domain_id"])["record"] == claim["record"]
    unproven = failed(node.call("domains.claims.verify", claim["domain_id"]))
    assert (unproven["statusCode"], unproven["name"]) == (422, "validation_error")
    dns_host.add(claim["record"]["name"], "TXT", claim["record"]["value"])
    verified = node.ok("domains.claims.verify", claim["domain_id"])
    assert verified["object"] == "domain_claim" and verified["status"] == "claimed"
    assert node.ok("domains.get", claim["domain_id"])["claimed"] is True
    # Claiming a name the team already has starts the claim on that domain.
    again = node.ok("domains.claims.create", {"name": name})
    assert again["domain_id"] == claim["domain_id"] and again["status"] == "claimed"


# Webhooks


def test_webhooks_create_get_list_update_rotate_remove(node: NodeBridge) -> None:
    # A public address, never contacted: nothing here sends an event to it.
    created = node.ok(
        "webhooks.create",
        {"endpoint": "https://93.184.216.34/hooks", "events": ["email.sent", "email.bounced"]},
    )
    assert created["object"] == "webhook" and created["secret"].startswith("whsec_")
    hook_id = created["id"]
    got = node.ok("webhooks.get", hook_id)
    assert (got["endpoint"], got["events"], got["status"]) == (
        "https://93.184.216.34/hooks",
        ["email.sent", "email.bounced"],
        "enabled",
    )
    assert "secret" not in got and "signing_secret" not in got
    assert hook_id in {h["id"] for h in node.ok("webhooks.list")["data"]}

    updated = node.ok(
        "webhooks.update",
        hook_id,
        {
            "endpoint": "https://93.184.216.34/v2",
            "events": ["email.delivered"],
            "status": "disabled",
        },
    )
    assert updated["object"] == "webhook" and updated["id"] == hook_id
    got = node.ok("webhooks.get", hook_id)
    assert (got["endpoint"], got["events"], got["status"], got["enabled"]) == (
        "https://93.184.216.34/v2",
        ["email.delivered"],
        "disabled",
        False,
    )
    node.ok("webhooks.update", hook_id, {"status": "enabled"})
    assert node.ok("webhooks.get", hook_id)["status"] == "enabled"

    rotated = node.ok("webhooks.rotateSigningSecret", hook_id)
    assert rotated["object"] == "webhook" and rotated["id"] == hook_id
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != created["secret"]

    removed = node.ok("webhooks.remove", hook_id)
    assert removed == {"object": "webhook", "id": hook_id, "deleted": True}
    gone = failed(node.call("webhooks.get", hook_id))
    assert (gone["statusCode"], gone["name"]) == (404, "not_found")
    private = failed(
        node.call("webhooks.create", {"endpoint": "not a url", "events": ["email.sent"]})
    )
    assert (private["statusCode"], private["name"]) == (422, "validation_error")


def test_webhooks_signing_secret(node: NodeBridge) -> None:
    created = node.ok(
        "webhooks.create", {"endpoint": "https://93.184.216.34/s", "events": ["email.sent"]}
    )
    assert created["signing_secret"] == created["secret"]
    rotated = node.ok("webhooks.rotateSigningSecret", created["id"])
    assert rotated["signing_secret"] == rotated["secret"] != created["secret"]


def test_webhooks_list_pages(node: NodeBridge) -> None:
    ids = [
        node.ok(
            "webhooks.create", {"endpoint": f"https://93.184.216.34/{i}", "events": ["email.sent"]}
        )["id"]
        for i in range(2)
    ]
    first = node.ok("webhooks.list", {"limit": 1})
    assert len(first["data"]) == 1 and first["has_more"] is True
    everything = node.ok("webhooks.list")
    assert [h["id"] for h in everything["data"]][-2:] == ids  # oldest first
    assert everything["has_more"] is False
    after = node.ok("webhooks.list", {"limit": 1, "after": ids[0]})
    assert [h["id"] for h in after["data"]] == [ids[1]] and after["has_more"] is False
    before = node.ok("webhooks.list", {"limit": 1, "before": ids[1]})
    assert [h["id"] for h in before["data"]] == [ids[0]]


async def test_webhook_events_attempts_replay_and_verify(node: NodeBridge) -> None:
    async with running_receiver() as receiver:
        created = await asyncio.to_thread(
            node.ok, "webhooks.create", {"endpoint": receiver.url, "events": ["email.delivered"]}
        )
        hook_id, secret = created["id"], created["secret"]
        sent = await asyncio.to_thread(
            node.ok,
            "emails.send",
            {
                "from": "hello@acme.test",
                "to": "delivered@simulator.test",
                "subject": "h",
                "text": "t",
            },
        )
        await eventually(lambda: len(receiver.requests) >= 1, what="the webhook delivery")
        delivered = receiver.requests[0]
        headers = {
            "id": delivered.headers["webhook-id"],
            "timestamp": delivered.headers["webhook-timestamp"],
            "signature": delivered.headers["webhook-signature"],
        }
        verified = await asyncio.to_thread(
            node.call,
            "webhooks.verify",
            {"payload": delivered.body.decode(), "headers": headers, "webhookSecret": secret},
        )
        assert verified["value"]["type"] == "email.delivered"
        assert verified["value"]["data"]["email_id"] == sent["id"]

        async def events() -> list[dict[str, Any]]:
            listed = await asyncio.to_thread(
                node.ok, "webhooks.events.list", {"webhookId": hook_id}
            )
            items: list[dict[str, Any]] = listed["data"]
            return items

        async def recorded() -> bool:  # the attempt is written once the receiver has answered
            return [e["status"] for e in await events()] == ["delivered"]

        await eventually(recorded, what="the delivered event")
        (event,) = await events()
        assert event["type"] == "email.delivered"
        got = await asyncio.to_thread(
            node.ok, "webhooks.events.get", {"webhookId": hook_id, "eventId": event["id"]}
        )
        assert (got["object"], got["id"], got["type"], got["status"]) == (
            "webhook_event",
            event["id"],
            "email.delivered",
            "delivered",
        )
        assert got["payload"]["data"]["email_id"] == sent["id"]
        page = await asyncio.to_thread(
            node.ok, "webhooks.events.list", {"webhookId": hook_id, "limit": 1}
        )
        assert [e["id"] for e in page["data"]] == [event["id"]] and page["has_more"] is False
        assert event["payload"]["data"]["email_id"] == sent["id"]
        attempts = await asyncio.to_thread(
            node.ok, "webhooks.events.attempts.list", {"webhookId": hook_id, "eventId": event["id"]}
        )
        (attempt,) = attempts["data"]
        assert attempt["status_code"] == 200 and attempt["success"] is True

        replayed = await asyncio.to_thread(
            node.ok, "webhooks.events.replay", {"webhookId": hook_id, "eventId": event["id"]}
        )
        assert replayed["id"] == event["id"]
        await eventually(lambda: len(receiver.requests) >= 2, what="the replayed delivery")
        assert receiver.requests[1].headers["webhook-id"] == headers["id"]

        async def recorded_twice() -> bool:
            listed = await asyncio.to_thread(
                node.ok,
                "webhooks.events.attempts.list",
                {"webhookId": hook_id, "eventId": event["id"]},
            )
            return len(listed["data"]) == 2

        await eventually(recorded_twice, what="the replay's attempt record")
        await asyncio.to_thread(node.ok, "webhooks.remove", hook_id)


def test_webhook_events_get_of_an_unknown_event(node: NodeBridge) -> None:
    hook = node.ok(
        "webhooks.create", {"endpoint": "https://93.184.216.34/e", "events": ["email.sent"]}
    )
    # An event id that does not exist answers not_found in the SDK's shape, not 'no such endpoint'.
    missing = failed(
        node.call("webhooks.events.get", {"webhookId": hook["id"], "eventId": str(uuid.uuid4())})
    )
    assert missing["statusCode"] == 404 and "Event" in missing["message"]


# API keys


def test_api_keys_create_list_remove(node: NodeBridge) -> None:
    created = node.ok("apiKeys.create", {"name": "ci sender", "permission": "sending_access"})
    assert created["object"] == "api_key" and created["token"].startswith("ph_test_")
    listed = {k["id"]: k for k in node.ok("apiKeys.list")["data"]}
    assert listed[created["id"]]["name"] == "ci sender" and "token" not in listed[created["id"]]
    assert listed[created["id"]]["permission"] == "sending_access"

    body = {"from": "hello@acme.test", "to": "a@example.com", "subject": "k", "text": "t"}
    assert node.ok("emails.send", body, key=created["token"])["status"] == "queued"
    restricted = failed(node.call("domains.list", key=created["token"]))
    assert (restricted["statusCode"], restricted["name"]) == (401, "restricted_api_key")

    domain = node.ok("domains.create", {"name": f"{unique('key')}.test"})
    scoped = node.ok("apiKeys.create", {"name": "one domain", "domain_id": domain["id"]})
    assert scoped["domain_id"] == domain["id"]

    removed = node.ok("apiKeys.remove", created["id"])
    assert removed == {"object": "api_key", "id": created["id"], "deleted": True}
    revoked = failed(node.call("emails.send", body, key=created["token"]))
    assert (revoked["statusCode"], revoked["name"]) == (403, "invalid_api_key")
    assert created["id"] not in {k["id"] for k in node.ok("apiKeys.list")["data"]}


def test_api_keys_list_pages(node: NodeBridge) -> None:
    ids = [node.ok("apiKeys.create", {"name": f"page {i}"})["id"] for i in range(2)]
    first = node.ok("apiKeys.list", {"limit": 1})
    assert len(first["data"]) == 1 and first["has_more"] is True
    assert [k["id"] for k in node.ok("apiKeys.list")["data"]][-2:] == ids  # oldest first
    after = node.ok("apiKeys.list", {"limit": 5, "after": ids[0]})
    assert [k["id"] for k in after["data"]] == [ids[1]] and after["has_more"] is False


def test_api_keys_update(node: NodeBridge) -> None:
    created = node.ok("apiKeys.create", {"name": "before"})
    updated = node.ok("apiKeys.update", created["id"], {"name": "after"})
    assert updated["object"] == "api_key" and updated["id"] == created["id"]
    listed = {k["id"]: k["name"] for k in node.ok("apiKeys.list")["data"]}
    assert listed[created["id"]] == "after"


# Suppressions


def test_suppressions_add_get_list_remove(node: NodeBridge) -> None:
    address = f"{unique('blocked')}@example.com"
    added = node.ok("suppressions.add", {"email": address})
    assert added["object"] == "suppression" and added["id"]
    got = node.ok("suppressions.get", address)
    assert (got["id"], got["email"], got["origin"]) == (added["id"], address, "manual")
    assert node.ok("suppressions.get", added["id"])["email"] == address
    listed = node.ok("suppressions.list", {"limit": 100})
    assert added["id"] in {s["id"] for s in listed["data"]}
    refused = failed(
        node.call(
            "emails.send", {"from": "hello@acme.test", "to": address, "subject": "s", "text": "t"}
        )
    )
    assert refused["name"] == "validation_error" and address in refused["message"]
    removed = node.ok("suppressions.remove", address)
    assert removed["id"] == added["id"] and removed["deleted"] is True
    gone = failed(node.call("suppressions.get", address))
    assert gone["statusCode"] == 404
    batch = [f"{i}-{address}" for i in range(2)]
    many = node.ok("suppressions.batch.add", {"emails": batch})
    assert [s["email"] for s in many["data"]] == batch
    removed_many = node.ok("suppressions.batch.remove", {"ids": [s["id"] for s in many["data"]]})
    assert [r["deleted"] for r in removed_many["data"]] == [True, True]
    assert failed(node.call("suppressions.get", batch[0]))["statusCode"] == 404
