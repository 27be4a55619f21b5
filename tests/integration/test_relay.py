"""The SMTP relay with smtplib as the client, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import email
import email.policy
import re
import smtplib
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.suppressions import parse_suppressed_address
from posthaste.server import Roles
from posthaste.smtp.relay import MAX_MESSAGE_BYTES, SHARE_PORTS, Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from posthaste.storage.emails import EmailFilter
from tests.conftest import Tenant, make_tenant
from tests.ports import free_port

SMTP_DOC = Path(__file__).resolve().parents[2] / "docs" / "smtp.md"
ID = r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}"


@dataclass
class Relay:
    server: RelayServer
    starttls_port: int
    tls_port: int
    context: ssl.SSLContext


@pytest.fixture
async def relay(services: Services) -> AsyncIterator[Relay]:
    server = RelayServer(
        services, "127.0.0.1", [Listener(0, False), Listener(0, True)], max_message_bytes=64_000
    )
    await server.start()
    cafile = services.settings.data_dir / CERT_FILENAME
    context = ssl.create_default_context(cafile=str(cafile))
    yield Relay(server, *server.ports, context)
    await server.close()


def message(**headers: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Acme <hello@acme.test>"
    msg["To"] = "Ann <ann@example.com>"
    msg["Subject"] = "Your order"
    for name, value in headers.items():
        del msg[name.replace("_", "-")]
        msg[name.replace("_", "-")] = value
    msg.set_content("Thanks for your order.\n")
    msg.add_alternative("<p>Thanks for your <b>order</b>.</p>", subtype="html")
    return msg


def _session(relay: Relay, implicit: bool) -> smtplib.SMTP:
    if implicit:
        return smtplib.SMTP_SSL("127.0.0.1", relay.tls_port, context=relay.context, timeout=30)
    client = smtplib.SMTP("127.0.0.1", relay.starttls_port, timeout=30)
    client.starttls(context=relay.context)
    return client


def _submit(
    relay: Relay, key: str, raw: bytes, rcpts: list[str], implicit: bool
) -> tuple[int, str]:
    with _session(relay, implicit) as client:
        client.login("posthaste", key)
        code, reply = client.mail("bounce@acme.test")
        assert code == 250, reply
        for rcpt in rcpts:
            code, reply = client.rcpt(rcpt)
            assert code == 250, reply
        code, reply = client.data(raw)
        return code, reply.decode()


async def submit(
    relay: Relay,
    key: str,
    msg: EmailMessage | bytes,
    rcpts: list[str] | None = None,
    *,
    implicit: bool = False,
) -> tuple[int, str]:
    raw = msg if isinstance(msg, bytes) else msg.as_bytes(policy=email.policy.SMTP)
    return await asyncio.to_thread(_submit, relay, key, raw, rcpts or ["ann@example.com"], implicit)


async def accepted_id(relay: Relay, key: str, msg: EmailMessage, **options: Any) -> str:
    code, reply = await submit(relay, key, msg, **options)
    assert code == 250 and reply.startswith("OK "), reply
    return reply.removeprefix("OK ")


async def get(client: httpx.AsyncClient, tenant: Tenant, path: str) -> Any:
    response = await client.get(path, headers=tenant.headers())
    assert response.status_code == 200, response.text
    return response if path.endswith("/raw") else response.json()


async def test_starttls_auth_and_the_record_from_the_headers(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    stream = {"id": "receipts", "name": "Receipts", "type": "transactional"}
    created = await client.post("/streams", json=stream, headers=tenant.headers())
    assert created.status_code == 201, created.text
    msg = message(
        Cc="carol@example.com",
        X_Posthaste_Tags="plan=pro, kind=receipt",
        X_Posthaste_Stream="receipts",
    )
    rcpts = ["ann@example.com", "carol@example.com", "audit@acme.test"]
    email_id = await accepted_id(relay, tenant.test, msg, rcpts=rcpts)
    record = await get(client, tenant, f"/emails/{email_id}")
    assert record["from"] == "Acme <hello@acme.test>" and record["subject"] == "Your order"
    assert (record["to"], record["cc"], record["bcc"]) == (
        ["Ann <ann@example.com>"],
        ["carol@example.com"],
        ["audit@acme.test"],
    )
    assert record["tags"] == {"plan": "pro", "kind": "receipt"}
    assert record["stream_id"] == "receipts" and record["status"] == "queued"
    assert record["origin"] == "relay"
    assert record["text"] == "Thanks for your order.\n" and "<b>order</b>" in record["html"]
    raw = (await get(client, tenant, f"/emails/{email_id}/raw")).content
    assert b"x-posthaste" not in raw.lower()
    stored = email.message_from_bytes(raw, policy=email.policy.default)
    assert stored["Message-ID"] == record["message_id"] and stored["Date"] is not None


async def test_the_data_reply_is_the_one_docs_smtp_shows(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    code, reply = await submit(relay, tenant.test, message())
    email_id = reply.removeprefix("OK ")
    assert (await get(client, tenant, f"/emails/{email_id}"))["id"] == email_id
    doc = await asyncio.to_thread(SMTP_DOC.read_text)
    shown = re.findall(r"250 OK [^`\"]+", doc)
    assert shown
    # The docs show a real reply: the same words, an id of the same form in place of the server's.
    assert {re.sub(ID, "<id>", line) for line in shown} == {re.sub(ID, "<id>", f"{code} {reply}")}


async def test_implicit_tls_with_auth_login_and_a_sending_key(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    def send() -> tuple[int, bytes]:
        with _session(relay, implicit=True) as smtp:
            smtp.ehlo()
            smtp.user, smtp.password = "posthaste", tenant.sending
            code, reply = smtp.auth("LOGIN", smtp.auth_login)
            assert code == 235, reply
            smtp.mail("hello@acme.test")
            smtp.rcpt("ann@example.com")
            return smtp.data(message().as_bytes(policy=email.policy.SMTP))

    code, reply = await asyncio.to_thread(send)
    assert code == 250
    record = await get(client, tenant, f"/emails/{reply.decode().removeprefix('OK ')}")
    assert record["to"] == ["Ann <ann@example.com>"]


@pytest.mark.parametrize("user", ["posthaste", "someone"])
async def test_a_wrong_key_or_user_is_535(relay: Relay, tenant: Tenant, user: str) -> None:
    def login() -> str:
        with _session(relay, implicit=False) as smtp:
            password = "ph_test_" + "x" * 32 if user == "posthaste" else tenant.test
            with pytest.raises(smtplib.SMTPAuthenticationError) as caught:
                smtp.login(user, password)
            return f"{caught.value.smtp_code} {caught.value.smtp_error.decode()}"

    assert (await asyncio.to_thread(login)).startswith("535 5.7.8 ")


async def test_no_auth_before_starttls_and_no_mail_before_auth(
    relay: Relay, tenant: Tenant
) -> None:
    def talk() -> list[tuple[int, bytes]]:
        with smtplib.SMTP("127.0.0.1", relay.starttls_port, timeout=30) as smtp:
            smtp.ehlo()
            assert not smtp.has_extn("auth") and smtp.has_extn("starttls")
            replies = [smtp.docmd("AUTH", "PLAIN " + "AHBvc3RoYXN0ZQB4")]
            replies.append(smtp.mail("hello@acme.test"))
            smtp.starttls(context=relay.context)
            smtp.ehlo()
            assert smtp.has_extn("auth") and "PLAIN" in smtp.esmtp_features["auth"]
            replies.append(smtp.mail("hello@acme.test"))
            return replies

    replies = await asyncio.to_thread(talk)
    assert [(code, text[:5]) for code, text in replies] == [
        (530, b"5.7.0"),
        (530, b"5.7.0"),
        (530, b"5.7.0"),
    ]


async def test_idempotency_key_replays_the_first_email(relay: Relay, tenant: Tenant) -> None:
    raw = message(X_Posthaste_Idempotency_Key="o-1").as_bytes(policy=email.policy.SMTP)
    first, again = [await submit(relay, tenant.test, raw) for _ in range(2)]
    assert first[0] == 250 and again == first
    other = message(X_Posthaste_Idempotency_Key="o-1", Subject="Another")
    code, reply = await submit(relay, tenant.test, other)
    assert (code, reply[:5]) == (554, "5.6.0")


async def test_a_suppressed_recipient_is_550_511(
    relay: Relay, services: Services, tenant: Tenant
) -> None:
    principal = await services.api_keys.authenticate(tenant.test)
    await services.suppressions.add(principal, parse_suppressed_address("ann@example.com"))
    code, reply = await submit(relay, tenant.test, message())
    assert (code, reply[:5]) == (550, "5.1.1") and "ann@example.com" in reply


async def test_the_size_limit_is_advertised_and_enforced(relay: Relay, tenant: Tenant) -> None:
    assert MAX_MESSAGE_BYTES == 25 * 1024 * 1024  # the relay's default, like the API's

    def talk() -> tuple[str, tuple[int, bytes], tuple[int, bytes]]:
        with _session(relay, implicit=False) as smtp:
            smtp.login("posthaste", tenant.test)
            size = smtp.esmtp_features["size"]
            declared = smtp.mail("hello@acme.test", ["SIZE=64001"])
            smtp.rset()
            smtp.mail("hello@acme.test")
            smtp.rcpt("ann@example.com")
            big = message()
            big.add_attachment(b"x" * 70_000, "application", "octet-stream", filename="big")
            return size, declared, smtp.data(big.as_bytes(policy=email.policy.SMTP))

    size, declared, data = await asyncio.to_thread(talk)
    assert size == "64000"
    assert (declared[0], declared[1][:5]) == (552, b"5.3.4")
    assert (data[0], data[1][:5]) == (552, b"5.3.4")


async def test_a_live_key_from_an_unverified_domain_is_550_571(
    relay: Relay, tenant: Tenant
) -> None:
    code, reply = await submit(relay, tenant.live, message())
    assert (code, reply[:5]) == (550, "5.7.1") and "acme.test" in reply


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({}, "From"),
        ({"X_Posthaste_Stream": "nope"}, "stream"),
        ({"X_Posthaste_Tags": "a"}, "name=value"),
        ({"X_Posthaste_Idempotency_Key": " "}, "Idempotency"),
    ],
)
async def test_invalid_content_is_554_560(
    relay: Relay, services: Services, tenant: Tenant, headers: dict[str, str], words: str
) -> None:
    msg = message(**headers)
    if not headers:
        del msg["From"]
    code, reply = await submit(relay, tenant.test, msg)
    assert (code, reply[:5]) == (554, "5.6.0") and words in reply
    principal = await services.api_keys.authenticate(tenant.test)
    assert (await services.emails.page(principal, EmailFilter(), None, 10)).items == []


async def test_rate_limit_and_quota_replies(relay: Relay, services: Services) -> None:
    limited = await make_tenant(services, rate_limit=1)

    def burst() -> list[tuple[int, bytes]]:
        with _session(relay, implicit=False) as smtp:
            smtp.login("posthaste", limited.test)
            replies = []
            for _ in range(8):
                smtp.mail("hello@acme.test")
                smtp.rcpt("ann@example.com")
                replies.append(smtp.data(message().as_bytes(policy=email.policy.SMTP)))
            return replies

    replies = await asyncio.to_thread(burst)
    assert replies[0][0] == 250 and (451, b"4.7.1") in [(c, t[:5]) for c, t in replies]
    quota = await make_tenant(services, daily_quota=1)
    assert (await submit(relay, quota.test, message()))[0] == 250
    code, reply = await submit(relay, quota.test, message())
    assert (code, reply[:5]) == (452, "4.5.3")


async def test_attachments_are_listed_like_rest_mail(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    msg = message()
    msg.add_attachment(b"%PDF-1.4 tiny", "application", "pdf", filename="invoice.pdf")
    email_id = await accepted_id(relay, tenant.test, msg)
    listed = (await get(client, tenant, f"/emails/{email_id}/attachments"))["data"]
    assert [(a["filename"], a["content_type"], a["size"]) for a in listed] == [
        ("invoice.pdf", "application/pdf", 13)
    ]


async def test_the_submitted_mime_is_delivered_unchanged(
    relay: Relay, services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    msg = message(X_Posthaste_Tags="a=1")
    submitted = msg.as_bytes(policy=email.policy.SMTP)
    email_id = await accepted_id(relay, tenant.test, msg)
    await services.make_worker().run_until_idle()
    record = await get(client, tenant, f"/emails/{email_id}")
    assert record["status"] == "delivered"
    raw = (await get(client, tenant, f"/emails/{email_id}/raw")).content
    added, _, rest = raw.partition(b"\r\n")
    # Like REST mail: <email id@from domain>, on the record and in the delivered message.
    assert record["message_id"] == f"<{email_id}@acme.test>"
    assert added == f"Message-ID: {record['message_id']}".encode()
    date, _, rest = rest.partition(b"\r\n")
    assert date.startswith(b"Date: ")
    without_tags = submitted.replace(b"X-Posthaste-Tags: a=1\r\n", b"")
    assert rest == without_tags


async def test_a_submitted_message_id_is_kept(
    relay: Relay, services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    msg = message(Message_ID="<order-42.7@shop.acme.test>")
    submitted = msg.as_bytes(policy=email.policy.SMTP)
    email_id = await accepted_id(relay, tenant.test, msg)
    await services.make_worker().run_until_idle()
    record = await get(client, tenant, f"/emails/{email_id}")
    assert record["status"] == "delivered"
    assert record["message_id"] == "<order-42.7@shop.acme.test>"
    raw = (await get(client, tenant, f"/emails/{email_id}/raw")).content
    date, _, rest = raw.partition(b"\r\n")
    assert date.startswith(b"Date: ") and rest == submitted
    assert raw.count(b"Message-ID:") == 1


async def test_the_51st_recipient_is_refused(relay: Relay, tenant: Tenant) -> None:
    def talk() -> list[tuple[int, bytes]]:
        with _session(relay, implicit=False) as smtp:
            smtp.login("posthaste", tenant.test)
            smtp.mail("hello@acme.test")
            return [smtp.rcpt(f"r{n}@example.com") for n in range(51)]

    replies = await asyncio.to_thread(talk)
    assert {code for code, _ in replies[:50]} == {250}
    assert (replies[50][0], replies[50][1][:5]) == (452, b"4.5.3")


async def test_a_non_ascii_address_with_smtputf8(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    msg = message()
    del msg["To"]
    msg["To"] = "José <josé@example.com>"

    def send() -> tuple[int, bytes]:
        with _session(relay, implicit=False) as smtp:
            smtp.login("posthaste", tenant.test)
            smtp.mail("hello@acme.test", ["SMTPUTF8"])
            smtp.rcpt("josé@example.com")
            return smtp.data(msg.as_bytes(policy=email.policy.SMTPUTF8))

    code, reply = await asyncio.to_thread(send)
    assert code == 250, reply
    record = await get(client, tenant, f"/emails/{reply.decode().removeprefix('OK ')}")
    assert record["to"] == ["José <josé@example.com>"]


async def test_a_database_outage_is_451_430_and_the_session_goes_on(
    relay: Relay, services: Services, tenant: Tenant
) -> None:
    loop = asyncio.get_running_loop()
    working = services.db.engine
    down = create_async_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")

    async def swap(engine: AsyncEngine) -> None:
        services.db.engine = engine

    def talk() -> list[tuple[int, bytes]]:
        replies = []
        with _session(relay, implicit=False) as smtp:
            smtp.login("posthaste", tenant.test)
            for engine in (down, working):
                asyncio.run_coroutine_threadsafe(swap(engine), loop).result()
                smtp.mail("hello@acme.test")
                smtp.rcpt("ann@example.com")
                replies.append(smtp.data(message().as_bytes(policy=email.policy.SMTP)))
        return replies

    try:
        failed, accepted = await asyncio.to_thread(talk)
    finally:
        services.db.engine = working
        await down.dispose()
    assert (failed[0], failed[1][:5]) == (451, b"4.3.0") and accepted[0] == 250


async def test_a_key_revoked_during_a_session_stops_it(
    relay: Relay, services: Services, tenant: Tenant
) -> None:
    loop = asyncio.get_running_loop()
    [key] = [k for k in await services.api_keys.all(tenant.team.id) if k.name == "send"]

    def talk() -> list[tuple[int, bytes]]:
        replies = []
        with _session(relay, implicit=False) as smtp:
            smtp.login("posthaste", tenant.sending)
            deadline = time.monotonic() + 15  # revocation reaches the key cache at once or soon
            while time.monotonic() < deadline and (not replies or replies[-1][0] == 250):
                smtp.mail("hello@acme.test")
                smtp.rcpt("ann@example.com")
                replies.append(smtp.data(message().as_bytes(policy=email.policy.SMTP)))
                if len(replies) == 1:
                    revoke = services.api_keys.revoke(key.id)
                    asyncio.run_coroutine_threadsafe(revoke, loop).result()
        return replies

    replies = await asyncio.to_thread(talk)
    assert replies[0][0] == 250
    assert (replies[-1][0], replies[-1][1][:5]) == (535, b"5.7.8")


async def test_stopping_lets_a_message_being_accepted_get_its_reply(
    relay: Relay, services: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = asyncio.Event()
    accept = services.sending.accept

    async def held_accept(*args: Any, **kwargs: Any) -> Any:
        await release.wait()
        return await accept(*args, **kwargs)

    monkeypatch.setattr(services.sending, "accept", held_accept)
    sending = asyncio.create_task(submit(relay, tenant.test, message()))
    for _ in range(1000):  # bounded: until the message is inside the send path
        if relay.server.in_flight.count:
            break
        await asyncio.sleep(0.01)
    closing = asyncio.create_task(relay.server.close())
    await asyncio.sleep(0)
    assert not closing.done()
    release.set()
    code, reply = await sending
    await closing
    assert code == 250 and reply.startswith("OK ")


async def test_the_smtp_role_runs_the_relay_alone(settings: Settings, tenant: Tenant) -> None:
    port = free_port()
    alone = dataclasses.replace(
        settings, role=frozenset({"smtp"}), smtp_relay_port=0, smtp_relay_tls_port=port
    )
    services = build_services(alone)
    roles = Roles(services)
    try:
        roles.start()
        assert roles.api is None and roles.worker is None and roles.relay is not None
        for _ in range(1000):  # bounded: until the listener is up
            if roles.relay.servers:
                break
            await asyncio.sleep(0.01)
        relay = Relay(
            roles.relay,
            0,
            port,
            ssl.create_default_context(cafile=str(alone.data_dir / CERT_FILENAME)),
        )
        code, reply = await submit(relay, tenant.test, message(), implicit=True)
        assert code == 250 and reply.startswith("OK ")
    finally:
        await roles.stop()
        await services.close()


@pytest.mark.skipif(not SHARE_PORTS, reason="SO_REUSEPORT is not available on this system")
async def test_relay_processes_on_one_machine_share_the_ports(
    relay: Relay, services: Services, tenant: Tenant
) -> None:
    second = RelayServer(
        services,
        "127.0.0.1",
        [Listener(relay.starttls_port, False), Listener(relay.tls_port, True)],
    )
    await second.start()  # the same ports: no "address already in use"
    try:
        assert second.ports == [relay.starttls_port, relay.tls_port]
        await relay.server.close()  # the first goes away; the second keeps serving
        for implicit in (False, True):
            code, reply = await submit(relay, tenant.test, message(), implicit=implicit)
            assert code == 250 and reply.startswith("OK "), reply
    finally:
        await second.close()


async def test_a_malformed_path_is_a_syntax_error_not_a_crash(relay: Relay, tenant: Tenant) -> None:
    def talk() -> list[tuple[int, bytes]]:
        with _session(relay, implicit=False) as client:
            client.login("posthaste", tenant.test)
            client.ehlo()
            broken = client.docmd("MAIL FROM:<")  # the stdlib's parser raises IndexError
            odd = client.docmd("MAIL FROM:.@[")  # and AttributeError here
            ok = client.mail("bounce@acme.test")
            return [broken, odd, ok]

    *refused, (ok_code, _) = await asyncio.to_thread(talk)
    for code, text in refused:
        assert code == 553, text
        assert b"malformed address" in text and b"IndexError" not in text
        assert b"AttributeError" not in text
    assert ok_code == 250  # the session goes on
