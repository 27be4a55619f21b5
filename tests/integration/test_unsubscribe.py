"""Unsubscribing from broadcast-stream mail, on SQLite and PostgreSQL, with real parts.

- By mail (RFC 2369): smtplib sends to the ``mailto:`` address of a delivered message's own
  ``List-Unsubscribe``, through a real inbound server; the unsubscribe is committed before the
  250, is idempotent, records ``contact.updated`` and stores no mail; a forged, misplaced or
  orphaned address is refused at RCPT.
- Mail sent with ``POST /emails``, batch and the SMTP relay on a broadcast stream: delivered to
  a real sink with ``List-Unsubscribe`` and ``List-Unsubscribe-Post`` under a DKIM signature
  that dkimpy verifies; one click on it makes the address an unsubscribed contact, and later
  broadcast-stream mail to it is refused (transactional mail still goes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import smtplib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import dkim
from sqlalchemy import func, select

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.domains import RecordStatus
from posthaste.core.ids import now_ms
from posthaste.smtp.inbound import InboundServer
from posthaste.smtp.relay import Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from posthaste.storage import domains as domains_repo
from posthaste.storage.tables import received_emails
from tests.helpers import events_of
from tests.integration.test_broadcasts import (
    FORM,
    FROM,
    World,
    by_recipient,
    claim,
    header,
    published_txt,
    running_worker,
    world,
)
from tests.smtp_sink import Received
from tests.webhook_receiver import eventually

ONE_CLICK = {"content": b"List-Unsubscribe=One-Click", "headers": FORM}


@asynccontextmanager
async def inbound(services: Services) -> AsyncIterator[int]:
    """The inbound SMTP server on a free loopback port."""
    server = InboundServer(services, "127.0.0.1", [Listener(0, False)])
    await server.start()
    try:
        yield server.ports[0]
    finally:
        await server.close()


def _mail(port: int, rcpt: str, sender: str) -> tuple[int, bytes]:
    raw = f"From: {sender}\r\nTo: {rcpt}\r\nSubject: unsubscribe\r\n\r\nunsubscribe\r\n"
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.ehlo("client.example.com")
        code, reply = client.mail(sender)
        assert code == 250, reply
        code, reply = client.rcpt(rcpt)
        if code != 250:
            return code, reply
        return client.data(raw.encode())


async def mail(port: int, rcpt: str, sender: str = "someone@example.com") -> tuple[int, bytes]:
    return await asyncio.to_thread(_mail, port, rcpt, sender)


def list_unsubscribe(message: Received) -> tuple[str, str]:
    """The https link and the mailto address of a delivered message's own header."""
    https, mailto = [p.strip(" <>") for p in header(message, "List-Unsubscribe").split(",")]
    return https, mailto.removeprefix("mailto:")


def assert_signed(message: Received) -> None:
    """dkimpy verifies the signature, and it covers both list headers."""
    assert dkim.verify(message.data, dnsfunc=published_txt)
    signature = header(message, "DKIM-Signature").replace(" ", "").replace("\n", "")
    signed = signature.split("h=")[1].split(";")[0].lower().split(":")
    assert {"list-unsubscribe", "list-unsubscribe-post"} <= set(signed)
    assert header(message, "List-Unsubscribe-Post") == "List-Unsubscribe=One-Click"


async def contact_events(w: World, kind: str) -> list[dict[str, Any]]:
    async with w.services.db.read() as tx:
        return await events_of(tx, w.tenant.team.id, kind)


async def nothing_received(w: World) -> None:
    async with w.services.db.read() as tx:
        kept = await tx.conn.execute(select(func.count()).select_from(received_emails))
        assert kept.scalar_one() == 0
    assert (await w.call("GET", "/emails/received"))["data"] == []


async def delivered(w: World, count: int) -> dict[str, Received]:
    async with running_worker(w.services):
        await eventually(lambda: len(w.sink.messages) >= count, within=60, what="delivery")
    return by_recipient(w.sink)


async def test_mail_to_a_broadcasts_mailto_address_unsubscribes_its_contact(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        await w.call("POST", "/domains", 201, json={"name": "acme.test"})
        segment_id = await w.segment("ann@example.com", "bob@example.com")
        created = await w.broadcast(segment_id, send=True)
        async with running_worker(w.services):
            await w.finished(created["id"])
        mailed = by_recipient(w.sink)
        _, mailto = list_unsubscribe(mailed["ann@example.com"])
        _, bob_mailto = list_unsubscribe(mailed["bob@example.com"])
        assert mailto.startswith("unsubscribe+") and mailto.endswith("@send.acme.test")
        async with inbound(w.services) as port:
            for _ in range(2):  # idempotent: a second message changes nothing
                code, reply = await mail(port, mailto.upper(), "ann@example.com")
                assert code == 250, reply
                ann = await w.call("GET", "/contacts/ann@example.com")
                assert ann["unsubscribed"] is True  # committed before the 250
            assert (await w.call("GET", "/contacts/bob@example.com"))["unsubscribed"] is False
            updates = await contact_events(w, "contact.updated")
            assert [(e["email"], e["unsubscribed"]) for e in updates] == [("ann@example.com", True)]

            local, _, _ = mailto.partition("@")
            position = len("unsubscribe+") + 3
            forged = local[:position] + ("a" if local[position] != "a" else "b")
            forged += local[position + 1 :] + "@send.acme.test"
            elsewhere = f"{local}@send.other.test"  # genuine, but not a domain of the team
            bob = await w.call("GET", "/contacts/bob@example.com")
            await w.call("DELETE", f"/contacts/{bob['id']}")  # his address names no one now
            for refused in (forged, elsewhere, bob_mailto, "unsubscribe+nothing@send.acme.test"):
                code, reply = await mail(port, refused)
                assert (code, reply[:5]) == (550, b"5.7.1"), (refused, reply)
        await nothing_received(w)
        assert len(await contact_events(w, "contact.updated")) == 1


async def test_post_emails_on_a_broadcast_stream_carries_a_working_unsubscribe(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        body = {"from": FROM, "subject": "News", "html": "<p>News</p>", "stream_id": "broadcast"}
        sent = await w.call("POST", "/emails", json={**body, "to": "Dan <dan@example.com>"})
        assert sent["headers"]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        message = (await delivered(w, 1))["dan@example.com"]
        assert_signed(message)
        https, mailto = list_unsubscribe(message)
        assert sent["headers"]["List-Unsubscribe"] == header(message, "List-Unsubscribe")
        token = https.rsplit("/", 1)[1]
        assert https.startswith(w.services.settings.public_url)
        assert mailto == f"unsubscribe+{token}@send.acme.test"

        path = urlsplit(https).path
        page = await w.client.get(path)  # a GET changes nothing
        assert page.status_code == 200 and "dan@example.com" in page.text
        missing = await w.client.get("/contacts/dan@example.com", headers=w.tenant.headers("live"))
        assert missing.status_code == 404
        for _ in range(2):  # idempotent
            answer = await w.client.post(path, **ONE_CLICK)
            assert answer.status_code == 200 and "You are unsubscribed" in answer.text
        dan = await w.call("GET", "/contacts/dan@example.com")
        assert dan["unsubscribed"] is True
        created = await contact_events(w, "contact.created")
        assert [(e["email"], e["unsubscribed"]) for e in created] == [("dan@example.com", True)]
        assert await contact_events(w, "contact.updated") == []

        # Later mail on a broadcast stream to Dan is refused; transactional mail still goes.
        again = await w.client.post(
            "/emails", json={**body, "to": "DAN@example.com"}, headers=w.tenant.headers("live")
        )
        assert again.status_code == 422, again.text
        assert again.json()["name"] == "validation_error"
        assert "dan@example.com" in again.json()["message"]
        batch = await w.call(
            "POST",
            "/emails/batch",
            json=[{**body, "to": "dan@example.com"}, {**body, "to": "eve@example.com"}],
        )
        [refused, accepted] = batch["data"]
        assert refused["error"]["name"] == "validation_error" and "id" in accepted
        receipt = {**body, "to": "dan@example.com", "stream_id": "transactional"}
        assert "List-Unsubscribe" not in (await w.call("POST", "/emails", json=receipt))["headers"]


async def test_an_emails_mailto_address_unsubscribes_its_recipient_by_mail(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        await w.contact("fay@example.com", first_name="Fay")
        body = {"from": FROM, "to": "fay@example.com", "subject": "News", "text": "News"}
        await w.call("POST", "/emails", json={**body, "stream_id": "broadcast"})
        _, mailto = list_unsubscribe((await delivered(w, 1))["fay@example.com"])
        elsewhere = mailto.replace("@send.acme.test", "@send.other.test")
        async with inbound(w.services) as port:
            code, reply = await mail(port, elsewhere)  # not the domain it was sent from
            assert (code, reply[:5]) == (550, b"5.7.1"), reply
            for _ in range(2):
                assert (await mail(port, mailto))[0] == 250
        fay = await w.call("GET", "/contacts/fay@example.com")
        assert fay["unsubscribed"] is True and fay["first_name"] == "Fay"
        updates = await contact_events(w, "contact.updated")
        assert [(e["email"], e["unsubscribed"]) for e in updates] == [("fay@example.com", True)]
        await nothing_received(w)
        refused = await w.client.post(
            "/emails", json={**body, "stream_id": "broadcast"}, headers=w.tenant.headers("live")
        )
        assert refused.status_code == 422 and "fay@example.com" in refused.json()["message"]


async def test_broadcast_stream_mail_goes_to_one_recipient_and_keeps_a_senders_own_header(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        await w.call(
            "POST", "/streams", 201, json={"id": "news", "name": "News", "type": "broadcast"}
        )
        body = {"from": FROM, "subject": "News", "text": "News", "stream_id": "news"}
        for extra in ({"to": ["a@example.com", "b@example.com"]},
                      {"to": "a@example.com", "bcc": "b@example.com"}):  # fmt: skip
            answer = await w.client.post(
                "/emails", json={**body, **extra}, headers=w.tenant.headers("live")
            )
            assert answer.status_code == 422, answer.text
            assert "one recipient" in answer.json()["message"]
        own = {"List-Unsubscribe": "<https://acme.test/u/7>", "List-Unsubscribe-Post": "x"}
        kept = await w.call("POST", "/emails", json={**body, "to": "a@example.com", "headers": own})
        assert kept["headers"] == own  # the sender runs its own unsubscribe handling
        message = (await delivered(w, 1))["a@example.com"]
        assert header(message, "List-Unsubscribe") == "<https://acme.test/u/7>"


def _relay_submit(port: int, cafile: str, key: str, raw: bytes, rcpt: str) -> tuple[int, str]:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.starttls(context=ssl.create_default_context(cafile=cafile))
        client.login("posthaste", key)
        code, reply = client.mail("bounce@acme.test")
        assert code == 250, reply
        code, reply = client.rcpt(rcpt)
        assert code == 250, reply
        code, reply = client.data(raw)
        return code, reply.decode()


async def test_relay_mail_on_a_broadcast_stream_gets_the_header_under_dkim(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        server = RelayServer(w.services, "127.0.0.1", [Listener(0, False)])
        await server.start()
        cafile = str(w.services.settings.data_dir / CERT_FILENAME)
        raw = (
            f"From: {FROM}\r\nTo: gus@example.com\r\nSubject: News\r\n"
            "X-Posthaste-Stream: broadcast\r\n\r\nNews for you.\r\n"
        ).encode()
        try:
            key = w.tenant.live
            code, reply = await asyncio.to_thread(
                _relay_submit, server.ports[0], cafile, key, raw, "gus@example.com"
            )
            assert code == 250, reply
            message = (await delivered(w, 1))["gus@example.com"]
            assert_signed(message)
            https, _ = list_unsubscribe(message)
            assert message.data.endswith(b"\r\n\r\nNews for you.\r\n")  # kept as submitted
            answer = await w.client.post(urlsplit(https).path, **ONE_CLICK)
            assert answer.status_code == 200
            code, reply = await asyncio.to_thread(
                _relay_submit, server.ports[0], cafile, key, raw, "gus@example.com"
            )
            assert (code, reply[:5]) == (550, "5.7.1") and "gus@example.com" in reply
        finally:
            await server.close()


async def test_a_member_who_unsubscribes_while_its_chunk_is_read_is_not_mailed(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        segment_id = await w.segment("ann@example.com", "bob@example.com")
        created = await w.broadcast(segment_id, send=True)
        job = await claim(w.services)  # no worker runs: the test stores the chunk itself
        broadcasts = w.services.broadcasts
        chunk = await broadcasts.read_chunk(job)
        await w.call("PATCH", "/contacts/bob@example.com", json={"unsubscribed": True})
        async with w.services.db.transaction() as tx:
            await broadcasts.store_chunk(tx, job, chunk)
        final = await w.get(created["id"])
        assert (final["status"], final["sent"], final["skipped_unsubscribed"]) == ("sent", 1, 1)


async def test_a_broadcasts_mailto_needs_no_receiving_only_the_teams_domain(
    settings: Settings,
) -> None:
    """A verified sending domain with receiving off: its own addresses are refused, while the
    broadcast's unsubscribe address at ``send.<domain>`` works; once the team deletes the
    domain only the https link does."""
    async with world(settings) as w:
        added = await w.call("POST", "/domains", 201, json={"name": "acme.test"})
        assert added["receiving"] is False
        async with w.services.db.transaction() as tx:
            domain = await domains_repo.get_domain(tx, w.tenant.team.id, added["id"])
            assert domain is not None
            verified = RecordStatus.VERIFIED
            records = tuple(dataclasses.replace(r, status=verified) for r in domain.records)
            await domains_repo.update_domain(
                tx,
                dataclasses.replace(domain, status=verified, records=records, verified_at=now_ms()),
            )
        segment_id = await w.segment("ann@example.com", "bob@example.com")
        created = await w.broadcast(segment_id, send=True)
        async with running_worker(w.services):
            await w.finished(created["id"])
        mailed = by_recipient(w.sink)
        _, ann_mailto = list_unsubscribe(mailed["ann@example.com"])
        bob_https, bob_mailto = list_unsubscribe(mailed["bob@example.com"])
        async with inbound(w.services) as port:
            code, reply = await mail(port, "sales@acme.test")  # receiving is off
            assert (code, reply[:5]) == (550, b"5.7.1"), reply
            assert (await mail(port, ann_mailto))[0] == 250
            assert (await w.call("GET", "/contacts/ann@example.com"))["unsubscribed"] is True
            await w.call("DELETE", f"/domains/{added['id']}")
            code, reply = await mail(port, bob_mailto)
            assert (code, reply[:5]) == (550, b"5.7.1"), reply
        answer = await w.client.post(urlsplit(bob_https).path, **ONE_CLICK)
        assert answer.status_code == 200 and "You are unsubscribed" in answer.text
        assert (await w.call("GET", "/contacts/bob@example.com"))["unsubscribed"] is True
        await nothing_received(w)
