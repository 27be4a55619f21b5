"""Received mail through the official Resend Node SDK (``resend.emails.receiving``): list, get,
attachments, and ``forward``, which reads the raw message by its signed link and sends it on."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email import policy
from email.message import EmailMessage

import httpx
import pytest

from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import RunningServer
from tests.node_bridge import NodeBridge, require_node, running_bridge

FILE = b"%PDF-1.7\n" + bytes(range(256))


@pytest.fixture(scope="module")
def node_available() -> None:
    require_node()  # before the module's server starts


@pytest.fixture(scope="module")
def dns_host() -> Iterator[ZoneServer]:
    yield from running_zone()


@pytest.fixture(scope="module")
def server_env(dns_host: ZoneServer) -> dict[str, str]:
    return {"POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}"}


@pytest.fixture(scope="module")
def node(node_available: None, server: RunningServer) -> Iterator[NodeBridge]:
    with running_bridge(server.url, server.live_key, server.data_dir / "node-bridge.log") as node:
        yield node


def test_the_node_sdk_reads_and_forwards_received_mail(
    node: NodeBridge,
    server: RunningServer,
    receiving: str,
) -> None:
    msg = EmailMessage()
    msg["From"] = "Zoë <zoe@example.org>"
    msg["To"] = f"sales@{receiving}"
    msg["Subject"] = "Quote request"
    msg.set_content("Please quote.\n")
    msg.add_attachment(FILE, maintype="application", subtype="pdf", filename="specs.pdf")
    port = int(server.env["POSTHASTE_SMTP_INBOUND_PORT"])
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        assert (
            client.sendmail("zoe@example.org", [msg["To"]], msg.as_bytes(policy=policy.SMTP)) == {}
        )

    listed = node.ok("emails.receiving.list", {"limit": 10})
    [item] = [e for e in listed["data"] if e["subject"] == "Quote request"]
    email = node.ok("emails.receiving.get", item["id"])
    assert email["from"] == "Zoë <zoe@example.org>" and email["text"] == "Please quote.\n"
    [attachment] = email["attachments"]
    files = node.ok("emails.receiving.attachments.list", {"emailId": email["id"]})
    assert [f["id"] for f in files["data"]] == [attachment["id"]]
    details = node.ok(
        "emails.receiving.attachments.get", {"emailId": email["id"], "id": attachment["id"]}
    )
    assert httpx.get(details["download_url"]).content == FILE

    forwarded = node.ok(
        "emails.receiving.forward",
        {"emailId": email["id"], "to": "team@example.com", "from": f"bot@{receiving}"},
    )
    headers = {"Authorization": f"Bearer {server.live_key}"}
    sent = httpx.get(f"{server.url}/emails/{forwarded['id']}", headers=headers).json()
    assert sent["subject"] == "Quote request" and sent["to"] == ["team@example.com"]
    copies = httpx.get(f"{server.url}/emails/{forwarded['id']}/attachments", headers=headers)
    [copy] = copies.json()["data"]
    assert httpx.get(copy["download_url"]).content == FILE
