"""Received mail through the official ``resend`` Python SDK (``resend.Emails.Receiving``),
against a real ``posthaste serve`` whose inbound port is mailed with smtplib."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email import policy
from email.message import EmailMessage

import httpx
import pytest
import resend

from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import RunningServer

FILE = bytes(range(256)) * 8


@pytest.fixture(scope="module")
def dns_host() -> Iterator[ZoneServer]:
    yield from running_zone()


@pytest.fixture(scope="module")
def server_env(dns_host: ZoneServer) -> dict[str, str]:
    return {"POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}"}


@pytest.fixture
def sdk(server: RunningServer) -> Iterator[RunningServer]:
    previous = (resend.api_key, resend.api_url)
    resend.api_key, resend.api_url = server.live_key, server.url
    yield server
    resend.api_key, resend.api_url = previous


def mail(server: RunningServer, to: str, subject: str) -> str:
    msg = EmailMessage()
    msg["From"] = "Zoë <zoe@example.org>"
    msg["To"] = to
    msg["Subject"] = subject
    msg.set_content("Hi there\n")
    msg.add_attachment(FILE, maintype="application", subtype="octet-stream", filename="data.bin")
    port = int(server.env["POSTHASTE_SMTP_INBOUND_PORT"])
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        refused = client.sendmail("zoe@example.org", [to], msg.as_bytes(policy=policy.SMTP))
        assert refused == {}  # stored before the 250: listed at once
    return subject


def test_the_sdk_lists_gets_and_downloads_received_mail(sdk: RunningServer, receiving: str) -> None:
    subjects = [mail(sdk, f"hello@{receiving}", f"Ticket {n}: é") for n in range(3)]
    listed = resend.Emails.Receiving.list()
    assert [item["subject"] for item in listed["data"]] == subjects[::-1]  # newest first
    first_page = resend.Emails.Receiving.list({"limit": 2})
    assert len(first_page["data"]) == 2 and first_page["has_more"] is True
    rest = resend.Emails.Receiving.list({"limit": 2, "after": first_page["data"][-1]["id"]})
    assert [item["subject"] for item in rest["data"]] == [subjects[0]]

    email = resend.Emails.Receiving.get(listed["data"][0]["id"])
    assert email["from"] == "Zoë <zoe@example.org>" and email["to"] == [f"hello@{receiving}"]
    assert email["text"] == "Hi there\n" and email["subject"] == subjects[-1]
    [attachment] = email["attachments"]
    assert (attachment["filename"], attachment["size"]) == ("data.bin", len(FILE))

    files = resend.Emails.Receiving.Attachments.list(email["id"])
    assert [item["id"] for item in files["data"]] == [attachment["id"]]
    details = resend.Emails.Receiving.Attachments.get(email["id"], attachment["id"])
    assert details["size"] == len(FILE) and details["content_disposition"] == "attachment"
    assert httpx.get(details["download_url"]).content == FILE
