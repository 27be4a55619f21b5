"""Clients that keep sending through REST and the SMTP relay while a test breaks things, and
what each was answered; the sender domain they use, verified over the test DNS server."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from email.message import EmailMessage
from pathlib import Path

import aiosmtplib
import httpx

from tests.dns_server import ZoneServer

SENDER = "hello@acme.test"


class Load:
    """Clients that keep sending until told to stop, and what each was answered."""

    def __init__(self, url: str, key: str, relay_port: int, cert: Path) -> None:
        self.url, self.key, self.relay_port = url, key, relay_port
        self.tls = ssl.create_default_context(cafile=str(cert))
        self.stop = asyncio.Event()
        self.http_statuses: Counter[int] = Counter()
        self.smtp_replies: Counter[str] = Counter()
        self.accepted: dict[str, str] = {}  # recipient → email id
        self.sent = 0

    def next_recipient(self, kind: str) -> str:
        self.sent += 1
        return f"{kind}{self.sent}@example.com"

    async def rest(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30) as http:
            while not self.stop.is_set():
                to = self.next_recipient("rest")
                body = {"from": SENDER, "to": to, "subject": "Restart", "text": "Hi"}
                try:
                    response = await http.post("/emails", json=body)
                except httpx.TransportError:  # cut off (a killed process), or refused
                    self.http_statuses[-1] += 1
                    await asyncio.sleep(0.05)  # pacing: a client would wait before it retries
                    continue
                self.http_statuses[response.status_code] += 1
                if response.status_code == 200:
                    self.accepted[to] = response.json()["id"]
                elif response.status_code != 503:
                    print(response.status_code, response.text)
                await asyncio.sleep(0.01)  # a steady stream, not a flood: ~50/s per client

    async def relay(self) -> None:
        while not self.stop.is_set():
            to = self.next_recipient("relay")
            message = EmailMessage()
            message["From"], message["To"], message["Subject"] = SENDER, to, "Restart"
            message.set_content("Over the relay.\n")
            client = aiosmtplib.SMTP(
                hostname="127.0.0.1", port=self.relay_port, tls_context=self.tls, timeout=30
            )
            try:
                await client.connect(start_tls=True)
                await client.login("posthaste", self.key)
                _, reply = await client.send_message(message)
                self.smtp_replies["250"] += 1
                self.accepted[to] = reply.removeprefix("OK ").strip()
            except aiosmtplib.SMTPResponseException as exc:
                self.smtp_replies[str(exc.code)] += 1
                if exc.code // 100 != 4:
                    print("relay:", exc.code, exc.message)
            except aiosmtplib.SMTPException:  # a dropped session, or refused while restarting
                self.smtp_replies["dropped"] += 1
                await asyncio.sleep(0.05)  # pacing: a client would wait before it tries again
            finally:
                client.close()


async def verify_sender_domain(url: str, key: str, dns_host: ZoneServer) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        created = await http.post("/domains", json={"name": "acme.test"})
        assert created.status_code == 201, created.text
        for record in created.json()["records"]:
            if record["type"] == "TXT":
                dns_host.add(record["name"], "TXT", record["value"])
            elif record["type"] == "MX":
                dns_host.add(record["name"], "MX", (record["priority"], record["value"]))
            elif record["type"] == "CNAME":
                dns_host.add(record["name"], "CNAME", record["value"])
        verified = await http.post(f"/domains/{created.json()['id']}/verify")
        assert verified.json()["status"] == "verified", verified.text


async def until(condition: object, what: str, seconds: float = 60) -> None:
    assert callable(condition)
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
