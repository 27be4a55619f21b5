"""The inbound SMTP server with smtplib as the sender, and the received-mail API, on SQLite and
PostgreSQL: who may be mailed, what is stored, what the API answers; and bounces and complaints
arriving at a VERP address, each updating the email it names, none becoming received mail."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import smtplib
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.dkim import sign_message
from posthaste.core.inbound import MAX_INBOUND_BYTES
from posthaste.core.verp import verp_address
from posthaste.server import Roles
from posthaste.services.retention import DAY_MS, RetentionService
from posthaste.smtp.inbound import InboundServer
from posthaste.smtp.session import Listener
from posthaste.smtp.tls import CERT_FILENAME
from posthaste.storage.tables import received_emails
from tests import report_samples as samples
from tests.conftest import Tenant, make_tenant
from tests.dkim_keys import dns_record, make_key, record_name
from tests.dns_server import ZoneServer
from tests.integration.test_domain_ownership import verified_domain
from tests.integration.test_retention import make_due, next_millisecond
from tests.ports import free_port
from tests.webhook_receiver import eventually, running_receiver

PDF = bytes(range(256)) * 40 + b"%%EOF\r\n\x00\xff"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))


@pytest.fixture
def settings(settings: Settings, zone: ZoneServer) -> Settings:
    return dataclasses.replace(
        settings, dns_nameservers=zone.nameservers, webhook_allow_private=True
    )


@dataclass
class Mx:
    server: InboundServer
    port: int
    context: ssl.SSLContext


@pytest.fixture
async def mx(services: Services) -> AsyncIterator[Mx]:
    server = InboundServer(services, "127.0.0.1", [Listener(0, False)])
    await server.start()
    cafile = services.settings.data_dir / CERT_FILENAME
    context = ssl.create_default_context(cafile=str(cafile))
    yield Mx(server, server.ports[0], context)
    await server.close()


@pytest.fixture
async def receiving(client: httpx.AsyncClient, zone: ZoneServer, tenant: Tenant) -> dict[str, Any]:
    domain = await verified_domain(client, zone, tenant, "acme.test", receiving=True)
    return domain


def multipart() -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Jürgen Müller <jurgen@example.org>"
    msg["To"] = "Support Team <support@acme.test>, other@example.net"
    msg["Cc"] = "=?utf-8?q?Ren=C3=A9e?= <renee@acme.test>"
    msg["Subject"] = "Réclamation: commande n° 42 ☃"
    msg["Message-ID"] = "<order-42@example.org>"
    msg.set_content("Bonjour,\nvoici la facture.\n")
    msg.add_alternative('<p>Bonjour <img src="cid:logo@example.org"></p>', subtype="html")
    msg.get_payload()[1].add_related(PNG, "image", "png", cid="<logo@example.org>")
    msg.add_attachment(PDF, maintype="application", subtype="pdf", filename="facture-été.pdf")
    return msg


def _send(
    mx: Mx, raw: bytes, rcpts: list[str], sender: str = "jurgen@example.org", tls: bool = True
) -> tuple[int, bytes]:
    with smtplib.SMTP("127.0.0.1", mx.port, timeout=30) as client:
        client.ehlo("client.example.org")
        if tls:
            client.starttls(context=mx.context)
            client.ehlo("client.example.org")
        code, reply = client.mail(sender)
        assert code == 250, reply
        for rcpt in rcpts:
            code, reply = client.rcpt(rcpt)
            if code != 250:
                return code, reply
        return client.data(raw)


async def send(mx: Mx, msg: EmailMessage | bytes, rcpts: list[str], **options: Any) -> Any:
    raw = msg if isinstance(msg, bytes) else msg.as_bytes(policy=policy.SMTP)
    return await asyncio.to_thread(_send, mx, raw, rcpts, **options)


async def get(client: httpx.AsyncClient, tenant: Tenant, path: str, **headers: str) -> Any:
    response = await client.get(path, headers={**tenant.headers("live"), **headers})
    assert response.status_code == 200, response.text
    return response


async def test_mail_for_a_receiving_domain_is_stored_and_served_byte_exact(
    mx: Mx, client: httpx.AsyncClient, tenant: Tenant, receiving: dict[str, Any]
) -> None:
    sent = multipart().as_bytes(policy=policy.SMTP)
    code, reply = await send(mx, sent, ["support@acme.test"])
    assert code == 250, reply
    listed = (await get(client, tenant, "/emails/received")).json()
    [summary] = listed["data"]
    assert reply.decode().endswith(summary["id"])
    assert "html" not in summary and listed["next_cursor"] == ""
    record = (await get(client, tenant, f"/emails/received/{summary['id']}")).json()
    assert record["object"] == "received_email"
    assert record["from"] == "Jürgen Müller <jurgen@example.org>"
    assert record["to"] == ["Support Team <support@acme.test>", "other@example.net"]
    assert record["cc"] == ["Renée <renee@acme.test>"]
    assert record["received_for"] == ["support@acme.test"]
    assert record["subject"] == "Réclamation: commande n° 42 ☃"
    assert record["message_id"] == "<order-42@example.org>"
    assert record["text"] == "Bonjour,\nvoici la facture.\n"
    assert record["html"] == '<p>Bonjour <img src="cid:logo@example.org"></p>\n'
    assert record["headers"]["Subject"] == record["subject"]
    assert record["authentication"] == {"spf": "none", "dkim": "none", "dmarc": "none"}
    logo, invoice = record["attachments"]
    assert (logo["content_type"], logo["content_id"], logo["size"]) == (
        "image/png",
        "logo@example.org",
        len(PNG),
    )
    assert logo["content_disposition"] == "inline"
    assert (invoice["filename"], invoice["size"]) == ("facture-été.pdf", len(PDF))

    base = f"/emails/received/{record['id']}/attachments"
    listing = (await get(client, tenant, base)).json()
    assert [a["id"] for a in listing["data"]] == [logo["id"], invoice["id"]]
    assert [a["filename"] for a in listing["data"]] == ["attachment-1.png", "facture-été.pdf"]
    download = await get(client, tenant, f"{base}/{invoice['id']}")
    assert download.content == PDF
    assert download.headers["content-type"] == "application/pdf"
    assert "facture" in download.headers["content-disposition"]
    assert (await get(client, tenant, f"{base}/{logo['id']}")).content == PNG
    details = (
        await get(client, tenant, f"{base}/{invoice['id']}", accept="application/json")
    ).json()
    assert details["size"] == len(PDF)
    linked = await client.get(httpx.URL(details["download_url"]).path)  # no key needed
    assert linked.status_code == 200 and linked.content == PDF

    raw = (await get(client, tenant, f"/emails/received/{record['id']}/raw")).content
    first, _, rest = raw.partition(b"\r\n")
    assert first.startswith(b"Authentication-Results: mx.posthaste.localhost; spf=none")
    assert rest == sent  # kept as received, once
    by_link = await client.get(httpx.URL(record["raw"]["download_url"]).path)  # Resend's raw link
    assert by_link.status_code == 200 and by_link.content == raw


async def test_relaying_and_unknown_domains_are_refused(
    mx: Mx, client: httpx.AsyncClient, tenant: Tenant, receiving: dict[str, Any]
) -> None:
    for rcpt in ("someone@example.com", "a@not-ours.test", "support@sub.acme.test"):
        code, reply = await send(mx, multipart(), [rcpt])
        assert (code, reply[:5]) == (550, b"5.7.1"), (rcpt, reply)
    assert (await get(client, tenant, "/emails/received")).json()["data"] == []


async def test_a_domain_without_receiving_or_not_verified_is_refused(
    mx: Mx, services: Services, client: httpx.AsyncClient, zone: ZoneServer
) -> None:
    sender = await make_tenant(services)
    await verified_domain(client, zone, sender, "quiet.test")  # receiving off
    unverified = await make_tenant(services)
    response = await client.post(
        "/domains",
        json={"name": "later.test", "receiving": True},
        headers=unverified.headers("live"),
    )
    assert response.status_code == 201
    for rcpt in ("info@quiet.test", "info@later.test"):
        code, reply = await send(mx, multipart(), [rcpt])
        assert (code, reply[:5]) == (550, b"5.7.1")


async def test_a_forged_or_foreign_verp_address_is_refused_at_rcpt(
    mx: Mx, services: Services, receiving: dict[str, Any]
) -> None:
    genuine = verp_address(
        services.delivery.verp, "01900000-0000-7000-8000-000000000000", "acme.test"
    )
    forged = genuine[:12] + ("a" if genuine[12] != "a" else "b") + genuine[13:]
    for rcpt in (forged, "bounces+nothing@send.acme.test", genuine):
        code, reply = await send(mx, b"Subject: x\r\n\r\nx\r\n", [rcpt], sender="")
        assert (code, reply[:5]) == (550, b"5.7.1"), rcpt


async def test_starttls_and_size_are_offered_and_auth_is_not(mx: Mx) -> None:
    def ehlo() -> tuple[set[str], set[str], int]:
        with smtplib.SMTP("127.0.0.1", mx.port, timeout=30) as client:
            client.ehlo("c.example.org")
            before = set(client.esmtp_features)
            size = int(client.esmtp_features["size"])
            client.starttls(context=mx.context)
            client.ehlo("c.example.org")
            return before, set(client.esmtp_features), size

    before, after, size = await asyncio.to_thread(ehlo)
    assert "starttls" in before and "auth" not in before and "auth" not in after
    assert size == MAX_INBOUND_BYTES == 40 * 1024 * 1024


async def test_a_message_over_the_size_limit_is_552_and_not_stored(
    services: Services, client: httpx.AsyncClient, tenant: Tenant, receiving: dict[str, Any]
) -> None:
    server = InboundServer(services, "127.0.0.1", [Listener(0, False)], max_message_bytes=20_000)
    await server.start()
    try:
        small = Mx(server, server.ports[0], ssl.create_default_context())
        big = b"Subject: big\r\n\r\n" + b"x" * 70 + b"\r\n"
        code, reply = await send(small, big * 400, ["support@acme.test"], tls=False)
        assert (code, reply[:5]) == (552, b"5.3.4")

        def announced() -> tuple[int, bytes]:
            with smtplib.SMTP("127.0.0.1", small.port, timeout=30) as smtp:
                smtp.ehlo("c.example.org")
                return smtp.docmd("MAIL FROM:<a@example.org> SIZE=30000")

        code, reply = await asyncio.to_thread(announced)
        assert code == 552
    finally:
        await server.close()
    assert (await get(client, tenant, "/emails/received")).json()["data"] == []


async def test_email_received_reaches_a_webhook_with_the_attachments_metadata(
    mx: Mx,
    services: Services,
    client: httpx.AsyncClient,
    tenant: Tenant,
    receiving: dict[str, Any],
) -> None:
    dispatcher = services.make_webhook_dispatcher()
    task = asyncio.create_task(dispatcher.run())
    try:
        async with running_receiver() as receiver:
            hook = {"endpoint": receiver.url, "events": ["email.received"]}
            created = await client.post("/webhooks", json=hook, headers=tenant.headers("live"))
            assert created.status_code == 201
            code, _ = await send(mx, multipart(), ["support@acme.test"])
            assert code == 250
            await eventually(lambda: bool(receiver.requests), what="the webhook")
            envelope = json.loads(receiver.requests[0].body)
    finally:
        dispatcher.stop()
        await asyncio.wait_for(task, 10)
    [record] = (await get(client, tenant, "/emails/received")).json()["data"]
    assert envelope["type"] == "email.received"
    data = envelope["data"]
    assert data["email_id"] == record["id"] and data["subject"] == record["subject"]
    assert data["from"] == record["from"] and data["to"] == record["to"]
    assert data["message_id"] == "<order-42@example.org>"
    assert data["attachments"] == [
        {k: a[k] for k in ("id", "filename", "content_type", "size")} for a in record["attachments"]
    ]


# --- reports to VERP addresses ---------------------------------------------------------

RCPTS = ["ann@example.com", "bob@example.net"]


async def delivered_email(
    services: Services, client: httpx.AsyncClient, zone: ZoneServer, tenant: Tenant
) -> tuple[str, str]:
    """An email from acme.test to ann and bob, delivered; its id and its VERP address."""
    await verified_domain(client, zone, tenant, "acme.test")
    body = {"from": "Acme <hello@acme.test>", "to": RCPTS, "subject": "Your order", "text": "Hi"}
    response = await client.post("/emails", json=body, headers=tenant.headers("live"))
    assert response.status_code == 200, response.text
    email_id: str = response.json()["id"]
    await services.make_worker().run_until_idle()
    assert (await status_of(client, tenant, email_id)) == "delivered"
    return email_id, verp_address(services.delivery.verp, email_id, "acme.test")


async def status_of(client: httpx.AsyncClient, tenant: Tenant, email_id: str) -> str:
    status: str = (await get(client, tenant, f"/emails/{email_id}")).json()["status"]
    return status


async def events_of(client: httpx.AsyncClient, tenant: Tenant, email_id: str) -> list[Any]:
    events: list[Any] = (await get(client, tenant, f"/emails/{email_id}/events")).json()["data"]
    return events


async def suppressed(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, str]:
    items = (await get(client, tenant, "/suppressions")).json()["data"]
    return {item["email"]: item["origin"] for item in items}


async def kept(services: Services, team_id: str) -> list[tuple[str, str | None]]:
    async with services.db.read() as tx:
        r = received_emails
        query = select(r.c.kind, r.c.email_id).where(r.c.team_id == team_id).order_by(r.c.id)
        return [(row.kind, row.email_id) for row in await tx.conn.execute(query)]


async def test_dsns_bounce_each_recipient_and_suppress_unknown_addresses(
    mx: Mx, services: Services, client: httpx.AsyncClient, zone: ZoneServer, tenant: Tenant
) -> None:
    email_id, verp = await delivered_email(services, client, zone, tenant)
    code, reply = await send(mx, samples.gmail_user_unknown(RCPTS[0], verp), [verp], sender="")
    assert code == 250, reply
    assert await status_of(client, tenant, email_id) == "delivered"  # bob still delivered
    bounced = [e for e in await events_of(client, tenant, email_id) if e["type"] == "email.bounced"]
    [first] = bounced
    assert first["data"]["to"] == [RCPTS[0]]
    assert first["data"]["bounce"]["type"] == "Permanent"
    assert first["data"]["bounce"]["subtype"] == "NoEmail"
    assert "5.1.1" in first["data"]["bounce"]["diagnostic"]
    assert await suppressed(client, tenant) == {RCPTS[0]: "bounce"}

    again = samples.gmail_user_unknown(RCPTS[0], verp)  # a repeated report changes nothing
    assert (await send(mx, again, [verp], sender=""))[0] == 250
    code, _ = await send(mx, samples.rfc3464_failed(RCPTS[1], verp), [verp], sender="")
    assert code == 250
    assert await status_of(client, tenant, email_id) == "bounced"
    events = await events_of(client, tenant, email_id)
    bounces = [e["data"] for e in events if e["type"] == "email.bounced"]
    assert [b["to"] for b in bounces] == [[RCPTS[0]], [RCPTS[1]]]
    assert bounces[1]["bounce"]["type"] == "Transient"  # 4.0.0: no suppression
    assert await suppressed(client, tenant) == {RCPTS[0]: "bounce"}
    assert (await get(client, tenant, "/emails/received")).json()["data"] == []
    assert await kept(services, tenant.team.id) == [("dsn", email_id)] * 3


async def test_an_arf_complaint_marks_the_email_complained_and_suppresses(
    mx: Mx, services: Services, client: httpx.AsyncClient, zone: ZoneServer, tenant: Tenant
) -> None:
    email_id, verp = await delivered_email(services, client, zone, tenant)
    code, _ = await send(mx, samples.yahoo_arf(RCPTS[1], verp), [verp], sender="")
    assert code == 250
    assert await status_of(client, tenant, email_id) == "complained"
    [complaint] = [
        e for e in await events_of(client, tenant, email_id) if e["type"] == "email.complained"
    ]
    assert complaint["data"]["to"] == [RCPTS[1]]
    assert await suppressed(client, tenant) == {RCPTS[1]: "complaint"}
    assert await kept(services, tenant.team.id) == [("complaint", email_id)]


async def test_auto_replies_and_unreadable_mail_change_nothing_and_are_kept(
    mx: Mx, services: Services, client: httpx.AsyncClient, zone: ZoneServer, tenant: Tenant
) -> None:
    email_id, verp = await delivered_email(services, client, zone, tenant)
    before = await events_of(client, tenant, email_id)
    for raw in (samples.out_of_office(verp), samples.plain_reply(verp), b"\xff\xfe\r\n\r\n"):
        assert (await send(mx, raw, [verp], sender="ann@example.com"))[0] == 250
    assert await events_of(client, tenant, email_id) == before
    assert await status_of(client, tenant, email_id) == "delivered"
    assert await suppressed(client, tenant) == {}
    assert (await get(client, tenant, "/emails/received")).json()["data"] == []
    kinds = [kind for kind, _ in await kept(services, tenant.team.id)]
    assert kinds == ["auto_reply", "unparseable", "unparseable"]


async def test_a_verp_address_on_another_domain_is_refused(
    mx: Mx, services: Services, client: httpx.AsyncClient, zone: ZoneServer, tenant: Tenant
) -> None:
    email_id, _ = await delivered_email(services, client, zone, tenant)
    elsewhere = verp_address(services.delivery.verp, email_id, "other.test")
    code, reply = await send(mx, samples.gmail_user_unknown(RCPTS[0], elsewhere), [elsewhere])
    assert (code, reply[:5]) == (550, b"5.7.1")
    assert await status_of(client, tenant, email_id) == "delivered"


# --- authentication results --------------------------------------------------------------


async def test_dkim_and_dmarc_are_checked_through_our_dns_and_recorded(
    mx: Mx,
    client: httpx.AsyncClient,
    tenant: Tenant,
    zone: ZoneServer,
    receiving: dict[str, Any],
) -> None:
    key = make_key("example.org", "s2026")
    zone.add(record_name(key), "TXT", dns_record(key))
    zone.add("_dmarc.example.org", "TXT", "v=DMARC1; p=reject")
    signed = sign_message(multipart().as_bytes(policy=policy.SMTP), key, int(time.time()))
    forged = b"Authentication-Results: mx.posthaste.localhost; dkim=pass; dmarc=pass\r\n"
    tampered = signed.replace(b"voici la facture", b"voici LA facture")
    for raw in (forged + signed, tampered):
        code, reply = await send(mx, raw, ["support@acme.test"])
        assert code == 250, reply
    # The key asked for once: the answers are kept for their TTL.
    assert zone.queries.count((record_name(key), "TXT")) == 1
    listed = (await get(client, tenant, "/emails/received")).json()["data"]
    assert [item["authentication"] for item in listed] == [
        {"spf": "none", "dkim": "fail", "dmarc": "none"},
        {"spf": "none", "dkim": "pass", "dmarc": "pass"},
    ]
    raw = (await get(client, tenant, f"/emails/received/{listed[1]['id']}/raw")).content
    assert raw == (
        b"Authentication-Results: mx.posthaste.localhost; spf=none"
        b" smtp.mailfrom=jurgen@example.org; dkim=pass header.d=example.org header.s=s2026;"
        b" dmarc=pass header.from=example.org\r\n" + signed
    )  # the forged field claiming our name is gone


async def test_the_inbound_role_runs_the_mx_alone(
    settings: Settings, client: httpx.AsyncClient, tenant: Tenant, receiving: dict[str, Any]
) -> None:
    port = free_port()
    alone = dataclasses.replace(settings, role="inbound", smtp_inbound_port=port)
    services = build_services(alone)
    roles = Roles(services)
    try:
        roles.start()
        assert roles.api is None and roles.worker is None and roles.relay is None
        assert roles.inbound is not None
        await asyncio.wait_for(roles.wait_listening(), 30)
        context = ssl.create_default_context(cafile=str(alone.data_dir / CERT_FILENAME))
        code, _ = await send(Mx(roles.inbound, port, context), multipart(), ["help@acme.test"])
        assert code == 250
    finally:
        await roles.stop()
        await services.close()
    [item] = (await get(client, tenant, "/emails/received")).json()["data"]
    assert item["received_for"] == ["help@acme.test"]


async def test_the_retention_purge_removes_old_received_content(
    mx: Mx, client: httpx.AsyncClient, services: Services, tenant: Tenant, receiving: dict[str, Any]
) -> None:
    """Bodies, raw message and attachment list of received mail older than the retention period
    go; the record stays with its envelope, addresses and subject; newer mail is untouched."""
    assert (await send(mx, multipart(), ["support@acme.test"]))[0] == 250
    cut = await next_millisecond()
    assert (await send(mx, multipart(), ["support@acme.test"]))[0] == 250
    new, old = (await get(client, tenant, "/emails/received")).json()["data"]  # newest first
    services.retention = RetentionService(services.db, 30, clock=lambda: cut + 30 * DAY_MS)
    await services.retention.ensure_scheduled()
    await make_due(services)
    await services.make_worker().run_until_idle()

    record = (await get(client, tenant, f"/emails/received/{old['id']}")).json()
    assert record["subject"] == "Réclamation: commande n° 42 ☃"
    assert record["received_for"] == ["support@acme.test"]
    assert record["html"] is None and record["text"] is None and record["attachments"] == []
    raw = await client.get(f"/emails/received/{old['id']}/raw", headers=tenant.headers("live"))
    assert raw.status_code == 404, raw.text
    record = (await get(client, tenant, f"/emails/received/{new['id']}")).json()
    assert record["text"] == "Bonjour,\nvoici la facture.\n" and len(record["attachments"]) == 2
    assert (await get(client, tenant, f"/emails/received/{new['id']}/raw")).content
