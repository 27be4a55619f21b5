"""``posthaste serve`` runs the SMTP relay beside the API and the workers (role ``all``)."""

from __future__ import annotations

import email.policy
import smtplib
import ssl
import time
from email.message import EmailMessage
from typing import Any

import httpx

from posthaste.smtp.tls import CERT_FILENAME
from tests.e2e.conftest import RunningServer


def wait_for_status(server: RunningServer, email_id: str, wanted: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {server.test_key}"}
    deadline = time.monotonic() + 15
    with httpx.Client(headers=headers) as http:  # one client: each makes a TLS context (~50 ms)
        while True:
            record: dict[str, Any] = http.get(f"{server.url}/emails/{email_id}").json()
            if record["status"] == wanted or time.monotonic() > deadline:
                return record
            time.sleep(0.05)


def submit(client: smtplib.SMTP, server: RunningServer, msg: EmailMessage) -> str:
    client.login("posthaste", server.test_key)
    client.mail("hello@acme.test")
    client.rcpt("delivered@simulator.test")
    code, reply = client.data(msg.as_bytes(policy=email.policy.SMTP))
    assert code == 250 and reply.startswith(b"OK "), reply
    return reply.decode().removeprefix("OK ")


def test_submitted_over_both_ports_and_delivered(server: RunningServer) -> None:
    context = ssl.create_default_context(cafile=str(server.data_dir / CERT_FILENAME))
    msg = EmailMessage()
    msg["From"] = "Acme <hello@acme.test>"
    msg["To"] = "delivered@simulator.test"
    msg["Subject"] = "Over the relay"
    msg.set_content("Sent with smtplib.\n")
    with smtplib.SMTP("127.0.0.1", int(server.env["POSTHASTE_SMTP_RELAY_PORT"])) as client:
        client.starttls(context=context)
        first = submit(client, server, msg)
    port = int(server.env["POSTHASTE_SMTP_RELAY_TLS_PORT"])
    with smtplib.SMTP_SSL("127.0.0.1", port, context=context) as client:
        second = submit(client, server, msg)
    for email_id in (first, second):
        record = wait_for_status(server, email_id, "delivered")
        assert record["status"] == "delivered" and record["subject"] == "Over the relay"
