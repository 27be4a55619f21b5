"""Real delivery: a loopback aiosmtpd sink as smarthost or MX, a dnslib zone, dkimpy verifying."""

from __future__ import annotations

import asyncio
import dataclasses
import email
import email.policy
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dkim
import dns.resolver
import httpx
import pytest

from posthaste.adapters.dns import Resolver
from posthaste.adapters.envelope import Envelope, RecipientReply
from posthaste.adapters.smtp_client import (
    MAX_TRANSACTIONS,
    ClientOptions,
    ConnectionPool,
    SmtpUnavailable,
    TlsContextFactory,
    Transcript,
    default_tls_context,
)
from posthaste.adapters.smtp_transports import Admission, MxTransport, Unthrottled
from posthaste.adapters.transports import build_transports
from posthaste.bootstrap import Services, build_services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.dkim import DkimKey
from posthaste.core.models import Email, Origin
from posthaste.core.submission import parse_submission
from posthaste.core.verp import read_verp, verp_signer
from posthaste.services.delivery_rules import DomainTlsRules, TlsRules
from posthaste.storage import jobs as jobs_repo
from tests.apps import make_app
from tests.conftest import SECRET, Tenant, _empty_tables, make_tenant
from tests.dkim_keys import StaticSigningKeys, dns_record, make_key, record_name
from tests.dns_server import ZoneServer
from tests.helpers import events_of
from tests.openapi_check import checked_client
from tests.senders import AnySender
from tests.smtp_sink import Sink, make_certificate, running_sink, server_context, trusting

KEY = make_key("acme.test")


@dataclasses.dataclass
class Mailer:
    services: Services
    client: httpx.AsyncClient
    tenant: Tenant

    async def send(self, **fields: Any) -> str:
        body = {
            "from": "Acme <hello@acme.test>",
            "to": "someone@example.com",
            "subject": "Hello",
            "html": "<p>Hi</p>",
            **fields,
        }
        response = await self.client.post("/emails", json=body, headers=self.tenant.headers("live"))
        assert response.status_code == 200, response.text
        email_id: str = response.json()["id"]
        return email_id

    async def deliver(self) -> None:
        await self.services.make_worker().run_until_idle()

    async def get(self, path: str) -> Any:
        response = await self.client.get(path, headers=self.tenant.headers("live"))
        assert response.status_code == 200, response.text
        return response.json()

    async def event_types(self, email_id: str) -> list[str]:
        return [e["type"] for e in (await self.get(f"/emails/{email_id}/events"))["data"]]

    async def deliver_until_settled(self, email_id: str, rounds: int = 40) -> dict[str, Any]:
        """Run the worker (retries are 0.2 s apart in tests) until no job is left."""
        for _ in range(rounds):
            await self.deliver()
            async with self.services.db.read() as tx:
                if await jobs_repo.depth(tx) == 0:
                    break
            await asyncio.sleep(0.1)
        record: dict[str, Any] = await self.get(f"/emails/{email_id}")
        return record


@asynccontextmanager
async def mailer(
    settings: Settings,
    target: DeliveryTarget,
    *,
    zone: ZoneServer | None = None,
    tls_context: TlsContextFactory = default_tls_context,
    mx_port: int = 25,
    keys: tuple[DkimKey, ...] = (KEY,),
    tls_rules: TlsRules | None = None,
) -> AsyncIterator[Mailer]:
    configured = dataclasses.replace(
        settings,
        delivery=target,
        dns_nameservers=zone.nameservers if zone else (),
    )
    services = build_services(
        configured,
        senders=AnySender(configured.default_region),
        signing_keys=StaticSigningKeys(*keys),
        transports=build_transports(configured, tls_context=tls_context, mx_port=mx_port),
        tls_rules=tls_rules,
    )
    await _empty_tables(services)
    await services.db.start_listening()
    try:
        async with checked_client(make_app(services)) as http:
            yield Mailer(services, http, await make_tenant(services))
    finally:
        await services.close()


def smarthost(sink: Sink, tls: str = "none", user: str | None = None) -> DeliveryTarget:
    return DeliveryTarget(
        kind="smtp",
        host="127.0.0.1",
        port=sink.port,
        tls=tls,  # type: ignore[arg-type]
        username=user,
        password="s3cret-pass" if user else None,
    )


def verify_dkim(zone: ZoneServer, message: bytes) -> bool:
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = zone.port

    def dnsfunc(name: bytes, timeout: int = 5) -> bytes:
        answer = resolver.resolve(name.decode().rstrip("."), "TXT")
        return b"".join(b"".join(r.strings) for r in answer)

    return bool(dkim.verify(message, dnsfunc=dnsfunc))


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    return make_certificate(tmp_path)


async def test_smarthost_delivery_is_signed_sent_and_transcribed(
    settings: Settings, zone: ZoneServer
) -> None:
    zone.set(record_name(KEY), "TXT", dns_record(KEY))
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        email_id = await m.send(subject="Grüße, café ☕", to=["a@example.com", "b@example.org"])
        await m.deliver()
        record = await m.get(f"/emails/{email_id}")
        assert record["status"] == "sent" and record["provider_message_id"] == "Q1"
        assert await m.event_types(email_id) == ["email.queued", "email.sending", "email.sent"]
        [received] = sink.messages
        assert sorted(received.recipients) == ["a@example.com", "b@example.org"]
        assert verify_dkim(zone, received.data)
        raw = await m.client.get(f"/emails/{email_id}/raw", headers=m.tenant.headers("live"))
        assert raw.content.replace(b"\r\n", b"\n") == received.data.replace(b"\r\n", b"\n")
        # The return path is a VERP address that names the email.
        assert received.mail_from.endswith("@send.acme.test")
        assert len(received.mail_from.split("@")[0]) <= 64
        assert read_verp(verp_signer(SECRET), received.mail_from) == email_id
        [attempt] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        assert attempt["transport"] == "smtp" and attempt["host"] == f"127.0.0.1:{sink.port}"
        assert attempt["attempt"] == 1 and attempt["duration_ms"] >= 0
        assert {r["outcome"] for r in attempt["replies"]} == {"accepted"}
        commands = [line["command"] for line in attempt["transcript"] if "command" in line]
        assert commands[0].startswith("EHLO ") and commands[-1].startswith("DATA (")
        assert "RCPT TO:<a@example.com>" in commands
        text = str(attempt["transcript"])
        assert "queued as Q1" in text and "Grüße" not in text and "<p>Hi</p>" not in text


@pytest.mark.parametrize("mode", ["starttls", "implicit"])
async def test_smarthost_over_tls_with_auth_hides_the_credentials(
    settings: Settings, cert: tuple[Path, Path], mode: str
) -> None:
    sink = Sink(credentials=("relay-user", "s3cret-pass"))
    context = server_context(*cert)
    async with (
        running_sink(sink, tls=context, implicit_tls=mode == "implicit", require_auth=True),
        mailer(settings, smarthost(sink, mode, "relay-user"), tls_context=trusting(cert[0])) as m,
    ):
        email_id = await m.send()
        await m.deliver()
        [attempt] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        assert (await m.get(f"/emails/{email_id}"))["status"] == "sent", attempt["transcript"]
        [received] = sink.messages
        assert received.tls and received.authenticated_as == "relay-user"
        text = str(attempt["transcript"])
        assert "AUTH (credentials hidden)" in text and "s3cret" not in text
        assert ("STARTTLS" in text) is (mode == "starttls")


async def test_an_untrusted_certificate_is_a_deferral(
    settings: Settings, cert: tuple[Path, Path]
) -> None:
    async with (
        running_sink(tls=server_context(*cert)) as sink,
        mailer(settings, smarthost(sink, "starttls")) as m,
    ):
        email_id = await m.send()
        await m.deliver()
        types = await m.event_types(email_id)
        # A slow run may already have retried (0.2 s later): deferred again each time.
        assert types[:2] == ["email.queued", "email.sending"]
        assert set(types[2:]) == {"email.delivery_delayed"}
        assert sink.messages == []


async def test_connections_to_the_smarthost_are_reused(settings: Settings) -> None:
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        first = await m.send()
        await m.deliver()
        second = await m.send()
        await m.deliver()
        assert len(sink.messages) == 2 and sink.connections == 1
        [attempt] = (await m.get(f"/emails/{second}/attempts"))["data"]
        assert "reusing the connection" in str(attempt["transcript"])
        assert (await m.get(f"/emails/{first}"))["provider_message_id"] == "Q1"


async def test_each_recipient_gets_its_own_outcome(settings: Settings, zone: ZoneServer) -> None:
    sink = Sink(
        rules={
            "defer": "451 4.3.0 Mailbox busy, try later",
            "unknown": "550 5.1.1 No such user",
            "policy": "550 5.7.1 Message refused as spam",
            "bare": "550 Mailbox unavailable",
        }
    )
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")
    recipients = [f"{p}@example.com" for p in ("ok", "defer", "unknown", "policy", "bare")]
    async with (
        running_sink(sink),
        mailer(settings, DeliveryTarget(kind="mx"), zone=zone, mx_port=sink.port) as m,
    ):
        email_id = await m.send(to=recipients)
        await m.deliver()
        events = (await m.get(f"/emails/{email_id}/events"))["data"]
        by_type = {(e["type"], e["data"]["to"][0]) for e in events if e["type"] != "email.queued"}
        assert ("email.delivered", "ok@example.com") in by_type
        assert ("email.delivery_delayed", "defer@example.com") in by_type
        bounces = {e["data"]["to"][0]: e["data"]["bounce"] for e in events if "bounce" in e["data"]}
        assert set(bounces) == {"unknown@example.com", "policy@example.com", "bare@example.com"}
        assert bounces["unknown@example.com"]["type"] == "Permanent"
        assert bounces["unknown@example.com"]["subtype"] == "NoEmail"
        assert (await m.get(f"/emails/{email_id}"))["status"] == "sent"
        # Only the recipient error suppresses the address, naming the email it came from.
        suppressed = (await m.get("/suppressions"))["data"]
        assert [(s["email"], s["origin"]) for s in suppressed] == [
            ("unknown@example.com", "bounce")
        ]
        async with m.services.db.read() as tx:
            [added] = await events_of(tx, m.tenant.team.id, "suppression.added")
        assert added == {**suppressed[0], "source_email_id": email_id}
        # The deferred recipient keeps being deferred, then bounces (Transient).
        sink.rules["defer"] = "452 4.2.2 Mailbox full"
        record = await m.deliver_until_settled(email_id)
        assert record["status"] == "delivered", [
            (e["type"], e["data"]["to"])
            for e in (await m.get(f"/emails/{email_id}/events"))["data"]
        ]
        types = await m.event_types(email_id)
        assert types.count("email.delivery_delayed") == 3  # the first try and two retries
        last_bounce = [e for e in (await m.get(f"/emails/{email_id}/events"))["data"]][-2:]
        assert any(e["data"].get("bounce", {}).get("type") == "Transient" for e in last_bounce)
        attempts = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        assert [a["attempt"] for a in attempts] == [1, 2, 3, 4]
        assert attempts[1]["recipients"] == ["defer@example.com"]
        assert [m.recipients for m in sink.messages] == [["ok@example.com"]]


async def test_mx_routing_falls_back_in_priority_order(
    settings: Settings, zone: ZoneServer
) -> None:
    zone.set("example.com", "MX", (20, "backup.example.com"), (10, "down.example.com"))
    zone.set("down.example.com", "A", "127.0.0.2")  # nothing listens there: refused
    zone.set("backup.example.com", "A", "127.0.0.1")
    zone.set("plain.example", "A", "127.0.0.1")  # no MX: the domain's own address
    zone.set("plain.example", "TXT", "v=spf1 -all")
    zone.set("nullmx.example", "MX", (0, ""))
    async with (
        running_sink() as sink,
        mailer(settings, DeliveryTarget(kind="mx"), zone=zone, mx_port=sink.port) as m,
    ):
        email_id = await m.send(
            to=["a@example.com", "b@plain.example", "c@nullmx.example", "d@nowhere.example"]
        )
        await m.deliver()
        assert sorted(r for msg in sink.messages for r in msg.recipients) == [
            "a@example.com",
            "b@plain.example",
        ]
        record = await m.get(f"/emails/{email_id}")
        assert (
            record["status"] == "delivered"
            and record["provider_message_id"] == record["message_id"]
        )
        attempts = {
            a["recipients"][0]: a for a in (await m.get(f"/emails/{email_id}/attempts"))["data"]
        }
        assert attempts["a@example.com"]["host"] == "backup.example.com"
        assert "down.example.com" in str(attempts["a@example.com"]["transcript"])
        bounces = {
            e["data"]["to"][0]: e["data"]["bounce"]["diagnostic"]
            for e in (await m.get(f"/emails/{email_id}/events"))["data"]
            if e["type"] == "email.bounced"
        }
        assert bounces["c@nullmx.example"].startswith("556 5.1.10")
        assert bounces["d@nowhere.example"].startswith("550 5.1.2")


async def test_enforced_tls_without_starttls_defers(settings: Settings, zone: ZoneServer) -> None:
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")
    async with running_sink() as sink:
        transport = MxTransport(
            Resolver(zone.nameservers), ClientOptions("mx.test"), ConnectionPool(), sink.port
        )
        envelope = Envelope("b@send.acme.test", ["x@example.com"], "<1@acme.test>", False, True)
        report = await transport.send(envelope, b"Subject: x\r\n\r\nbody\r\n")
        assert [r.code for r in report.replies] == [421] and sink.messages == []
        assert "TLS is required" in report.replies[0].text
        relaxed = dataclasses.replace(envelope, tls_required=False)
        report = await transport.send(relaxed, b"Subject: x\r\n\r\nbody\r\n")
        assert [r.code for r in report.replies] == [250] and len(sink.messages) == 1
        await transport.pool.close()


async def test_smtputf8_recipient_goes_with_smtputf8(settings: Settings, zone: ZoneServer) -> None:
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        email_id = await m.send(to="jösé@example.com")
        await m.deliver()
        assert (await m.get(f"/emails/{email_id}"))["status"] == "sent"
        [attempt] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        # The UTF-8 address is raw 8-bit in the To header: BODY=8BITMIME goes with SMTPUTF8.
        sent = [line.get("command", "") for line in attempt["transcript"]]
        assert any(c.endswith(" BODY=8BITMIME SMTPUTF8") for c in sent)
        assert sink.messages[0].recipients == ["jösé@example.com"]


async def test_an_unreachable_smarthost_defers_then_bounces_transient(settings: Settings) -> None:
    async with running_sink() as sink:
        port = sink.port
    target = DeliveryTarget(kind="smtp", host="127.0.0.1", port=port, tls="none")
    async with mailer(settings, target) as m:
        email_id = await m.send()
        record = await m.deliver_until_settled(email_id)
        assert record["status"] == "bounced"
        events = (await m.get(f"/emails/{email_id}/events"))["data"]
        assert [e["type"] for e in events].count("email.delivery_delayed") == 3
        assert events[-1]["data"]["bounce"]["type"] == "Transient"  # the fourth try
        assert (await m.get("/suppressions"))["data"] == []
        attempts = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        assert len(attempts) == 4 and "connection failed" in str(attempts[0]["transcript"]).lower()


async def test_attempts_are_scoped_by_team(settings: Settings) -> None:
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        email_id = await m.send()
        await m.deliver()
        other = await make_tenant(m.services)
        response = await m.client.get(f"/emails/{email_id}/attempts", headers=other.headers("live"))
        assert response.status_code == 404 and response.json()["name"] == "not_found"
        missing = await m.client.get(
            "/emails/00000000-0000-7000-8000-000000000000/attempts",
            headers=m.tenant.headers("live"),
        )
        assert missing.status_code == 404


async def test_test_mode_never_leaves_the_machine(settings: Settings) -> None:
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        response = await m.client.post(
            "/emails",
            json={"from": "a@acme.test", "to": "x@example.com", "subject": "s", "text": "t"},
            headers=m.tenant.headers("test"),
        )
        email_id = response.json()["id"]
        await m.deliver()
        assert sink.messages == []
        [attempt] = (await m.get(f"/emails/{email_id}/attempts"))["data"]
        assert attempt["transport"] == "capture"
        raw = await m.client.get(f"/emails/{email_id}/raw", headers=m.tenant.headers("live"))
        message = email.message_from_bytes(raw.content, policy=email.policy.default)
        assert message["DKIM-Signature"] is not None


async def test_an_unusable_key_fails_its_email_and_spares_the_batch(settings: Settings) -> None:
    broken = DkimKey("broken.test", "s1", b"-----BEGIN PRIVATE KEY-----\nnot a key\n")
    async with running_sink() as sink, mailer(settings, smarthost(sink), keys=(KEY, broken)) as m:
        bad = await m.send(**{"from": "hello@broken.test"})
        good = await m.send()
        await m.deliver()  # both in one claimed batch
        assert (await m.get(f"/emails/{good}"))["status"] == "sent"
        record = await m.get(f"/emails/{bad}")
        assert record["status"] == "failed"
        failed = (await m.get(f"/emails/{bad}/events"))["data"][-1]
        assert failed["type"] == "email.failed" and "signing" in failed["data"]["failed"]["reason"]
        assert [msg.recipients for msg in sink.messages] == [["someone@example.com"]]


async def test_connections_per_destination_are_capped_and_reused(zone: ZoneServer) -> None:
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")
    # The first two DATA commands wait until both have started, so both connections are open
    # at once whatever the machine's speed (one fast connection could otherwise take all six).
    sink = Sink(hold=asyncio.Event(), hold_count=2)
    async with running_sink(sink):
        pool = ConnectionPool(per_destination=2)
        transport = MxTransport(
            Resolver(zone.nameservers), ClientOptions("mx.test"), pool, sink.port
        )
        envelopes = [
            Envelope("b@send.acme.test", [f"user{i}@example.com"], f"<{i}@acme.test>")
            for i in range(6)
        ]
        sending = asyncio.gather(
            *(transport.send(e, b"Subject: x\r\n\r\nbody\r\n") for e in envelopes)
        )
        for _ in range(500):  # until two sends are in DATA (at most 5 s)
            if sink.data_started >= 2:
                break
            await asyncio.sleep(0.01)
        assert sink.hold is not None
        sink.hold.set()
        reports = await sending
        assert [r.code for report in reports for r in report.replies] == [250] * 6
        assert len(sink.messages) == 6 and sink.connections == 2
        await pool.close()


class _OneConnection(Unthrottled):
    """A throttle allowing one connection per destination that notes, at each slot given, how
    many sessions had ended by then."""

    def __init__(self) -> None:
        self.ended = 0
        self.ended_at_slot: list[int] = []

    async def admit(
        self,
        destination: str,
        mx_hosts: Sequence[str],
        transcript: Transcript,
        message_id: str = "",
    ) -> Admission:
        self.ended_at_slot.append(self.ended)
        return Admission(max_connections=1, messages_per_connection=MAX_TRANSACTIONS)

    async def observe(
        self,
        destination: str,
        replies: Sequence[RecipientReply],
        failed: SmtpUnavailable | None,
        transcript: Transcript,
    ) -> int | None:
        self.ended += 1
        return None


async def test_a_session_takes_its_slot_once_it_has_a_connection(zone: ZoneServer) -> None:
    """Slots taken before the connection cap would be used when connections free up, the
    sessions queued behind the cap all at once: a burst at the receiver. Once the cap is
    known, a session waits for its connection first, then for its slot."""
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")
    sink = Sink()
    async with running_sink(sink):
        pool, throttle = ConnectionPool(), _OneConnection()
        transport = MxTransport(
            Resolver(zone.nameservers), ClientOptions("mx.test"), pool, sink.port, throttle=throttle
        )
        raw = b"Subject: x\r\n\r\nbody\r\n"
        first = Envelope("b@send.acme.test", ["first@example.com"], "<0@acme.test>")
        await transport.send(first, raw)  # the destination's cap is known from now on
        envelopes = [
            Envelope("b@send.acme.test", [f"user{i}@example.com"], f"<{i}@acme.test>")
            for i in range(1, 4)
        ]
        reports = await asyncio.gather(*(transport.send(e, raw) for e in envelopes))
        assert [r.code for report in reports for r in report.replies] == [250] * 3
        # Each slot given after the session before it ended, not three slots at once.
        assert throttle.ended_at_slot == [0, 1, 2, 3]
        await pool.close()


async def test_a_silent_server_times_out_into_a_deferral(zone: ZoneServer) -> None:
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")
    silent: list[asyncio.StreamWriter] = []

    async def never_greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        silent.append(writer)  # accepts the connection and says nothing

    server = await asyncio.start_server(never_greet, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        options = ClientOptions("mx.test", timeout=0.3)
        transport = MxTransport(Resolver(zone.nameservers), options, ConnectionPool(), port)
        envelope = Envelope("b@send.acme.test", ["x@example.com"], "<1@acme.test>")
        report = await transport.send(envelope, b"Subject: x\r\n\r\nbody\r\n")
        [reply] = report.replies
        assert reply.code == 451 and "timed out" in reply.text
        assert "timed out" in str(report.sessions[0].transcript)
    finally:
        for writer in silent:
            writer.close()
        server.close()
        await server.wait_closed()


async def relayed(m: Mailer, submitted: bytes) -> Email:
    """Accept ``submitted`` as the SMTP relay does, with the tenant's live key."""
    principal = await m.services.api_keys.authenticate(m.tenant.live)
    submission = parse_submission(submitted, ["someone@example.com"], datetime.now(UTC))
    accepted = await m.services.sending.accept(principal.sender, Origin.RELAY, submission.request)
    assert isinstance(accepted, Email)
    return accepted


async def test_a_message_kept_from_the_relay_is_signed_when_delivered(
    settings: Settings, zone: ZoneServer
) -> None:
    zone.set(record_name(KEY), "TXT", dns_record(KEY))
    submitted = (
        b"From: Acme <hello@acme.test>\r\nTo: someone@example.com\r\nSubject: Kept as is\r\n"
        b"Message-ID: <kept-1@acme.test>\r\nX-Client: mailer 1.0\r\n\r\nBody line  \r\n\r\n"
    )
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        accepted = await relayed(m, submitted)
        await m.deliver()
        assert (await m.get(f"/emails/{accepted.id}"))["status"] == "sent"
        [received] = sink.messages
        assert received.data.startswith(b"DKIM-Signature:") and verify_dkim(zone, received.data)
        assert b"X-Client: mailer 1.0" in received.data
        raw = await m.client.get(f"/emails/{accepted.id}/raw", headers=m.tenant.headers("live"))
        assert raw.content == received.data


async def test_a_relay_message_without_a_message_id_is_signed_with_the_emails(
    settings: Settings, zone: ZoneServer
) -> None:
    zone.set(record_name(KEY), "TXT", dns_record(KEY))
    submitted = (
        b"From: Acme <hello@acme.test>\r\nTo: someone@example.com\r\nSubject: No id\r\n\r\nBody\r\n"
    )
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        accepted = await relayed(m, submitted)
        await m.deliver()
        record = await m.get(f"/emails/{accepted.id}")
        assert record["status"] == "sent"
        assert record["message_id"] == f"<{accepted.id}@acme.test>"
        [received] = sink.messages
        assert verify_dkim(zone, received.data)
        parsed = email.message_from_bytes(received.data, policy=email.policy.default)
        assert parsed.get_all("Message-ID") == [record["message_id"]]
        assert "message-id" in str(parsed["DKIM-Signature"]).lower()


class Domains:
    """``sending_domain`` as the domains service answers it: an object with ``tls``."""

    def __init__(self, tls: dict[str, str]) -> None:
        self.tls = tls

    async def sending_domain(self, team_id: str, name: str) -> Any:
        return (
            dataclasses.make_dataclass("D", ["tls"])(self.tls[name]) if name in self.tls else None
        )


async def test_a_domain_with_enforced_tls_is_never_sent_in_clear(
    settings: Settings, zone: ZoneServer
) -> None:
    zone.set("example.com", "MX", (10, "mx.example.com"))
    zone.set("mx.example.com", "A", "127.0.0.1")
    rules = DomainTlsRules(Domains({"acme.test": "enforced", "open.test": "opportunistic"}))
    async with (
        running_sink() as sink,
        mailer(
            settings, DeliveryTarget(kind="mx"), zone=zone, mx_port=sink.port, tls_rules=rules
        ) as m,
    ):
        strict = await m.send()
        relaxed = await m.send(**{"from": "hello@open.test"})
        await m.deliver()
        assert (await m.get(f"/emails/{relaxed}"))["status"] == "delivered"
        events = (await m.get(f"/emails/{strict}/events"))["data"]
        assert events[2]["type"] == "email.delivery_delayed"
        assert "4.7.10" in events[2]["data"]["delay"]["diagnostic"]
        assert len(sink.messages) == 1 and sink.messages[0].mail_from.endswith("@send.open.test")


async def test_workers_side_by_side_send_each_email_once(settings: Settings) -> None:
    """Two workers claiming (and starting, in the same transaction) small batches of the same
    queue, some of it arriving while they run: every email reaches the sink once."""
    async with running_sink() as sink, mailer(settings, smarthost(sink)) as m:
        ids = [await m.send(to=f"early{i}@example.com") for i in range(12)]
        workers = [m.services.make_worker(batch_size=3) for _ in range(2)]
        tasks = [asyncio.create_task(worker.run()) for worker in workers]
        try:
            ids += [await m.send(to=f"late{i}@example.com") for i in range(12)]
            for _ in range(600):  # until the smarthost took every email (60 s at most)
                if len(sink.messages) >= len(ids):
                    records = [await m.get(f"/emails/{email_id}") for email_id in ids]
                    if all(r["status"] == "sent" for r in records):
                        break
                await asyncio.sleep(0.1)
        finally:
            for worker in workers:
                worker.stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert all(r["status"] == "sent" for r in records)
        received = Counter(r for message in sink.messages for r in message.recipients)
        assert len(received) == 24 and set(received.values()) == {1}
