"""Broadcasts end to end on SQLite and PostgreSQL: the API, a real worker expanding in chunks,
delivery to a real SMTP sink, DKIM checked by dkimpy, and the one-click unsubscribe taken from
the delivered message's own ``List-Unsubscribe``."""

from __future__ import annotations

import asyncio
import dataclasses
import email
import email.policy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import dkim
import httpx
import pytest

from posthaste.adapters.transports import build_transports
from posthaste.bootstrap import Services, build_services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.ids import format_ms, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job
from posthaste.services.broadcasts import Step
from posthaste.storage import jobs as jobs_repo
from tests.apps import make_app
from tests.conftest import Tenant, _empty_tables, make_tenant
from tests.dkim_keys import StaticSigningKeys, dns_record, make_key, record_name
from tests.helpers import events_of
from tests.openapi_check import checked_client
from tests.senders import AnySender
from tests.smtp_sink import Received, Sink, running_sink
from tests.webhook_receiver import eventually

KEY = make_key("acme.test")
FROM = "Acme News <news@acme.test>"


@dataclasses.dataclass
class World:
    services: Services
    client: httpx.AsyncClient
    tenant: Tenant
    sink: Sink

    async def call(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        headers = self.tenant.headers("live")
        response = await self.client.request(method, path, headers=headers, **kwargs)
        assert response.status_code == status, response.text
        return response.json()

    async def contact(self, email_: str, **fields: Any) -> str:
        body = {"email": email_, **fields}
        return str((await self.call("POST", "/contacts", 201, json=body))["id"])

    async def segment(self, *emails: str) -> str:
        segment_id = str((await self.call("POST", "/segments", 201, json={"name": "All"}))["id"])
        for address in emails:
            contact_id = await self.contact(address)
            await self.call("POST", f"/contacts/{contact_id}/segments/{segment_id}")
        return segment_id

    async def broadcast(self, segment_id: str, **fields: Any) -> dict[str, Any]:
        body = {
            "segment_id": segment_id, "from": FROM, "subject": "Hello {{contact.first_name}}",
            "html": "<p>Hi</p><a href='{{unsubscribe_url}}'>stop</a>", **fields,
        }  # fmt: skip
        return dict(await self.call("POST", "/broadcasts", 201, json=body))

    async def get(self, broadcast_id: str) -> dict[str, Any]:
        return dict(await self.call("GET", f"/broadcasts/{broadcast_id}"))

    async def finished(self, broadcast_id: str, status: str = "sent") -> dict[str, Any]:
        """Until the broadcast has ``status`` and every email it made was delivered."""

        async def done() -> bool:
            record = await self.get(broadcast_id)
            return record["status"] == status and len(self.sink.messages) == record["sent"]

        await eventually(done, within=60, what=f"broadcast {broadcast_id} {status}, delivered")
        return await self.get(broadcast_id)


@asynccontextmanager
async def world(settings: Settings, **options: Any) -> AsyncIterator[World]:
    """Posthaste with a smarthost delivery to a real sink and a DKIM key for acme.test."""
    async with running_sink() as sink:
        target = DeliveryTarget(kind="smtp", host="127.0.0.1", port=sink.port, tls="none")
        configured = dataclasses.replace(settings, delivery=target)
        services = build_services(
            configured,
            senders=AnySender(configured.default_region),
            signing_keys=StaticSigningKeys(KEY),
            transports=build_transports(configured),
        )
        services.broadcasts.chunk_size = options.get("chunk_size", 500)
        await _empty_tables(services)
        await services.db.start_listening()
        try:
            tenant = await make_tenant(services, daily_quota=options.get("daily_quota", 0))
            async with checked_client(make_app(services)) as http:
                yield World(services, http, tenant, sink)
        finally:
            await services.close()


@asynccontextmanager
async def running_worker(services: Services) -> AsyncIterator[None]:
    worker = services.make_worker()
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        worker.stop()
        await task


def published_txt(name: bytes, timeout: int = 5) -> bytes:
    assert name.decode().rstrip(".") == record_name(KEY)
    return dns_record(KEY).encode()


def header(message: Received, name: str) -> str:
    parsed = email.message_from_bytes(message.data, policy=email.policy.default)
    return str(parsed[name])


def by_recipient(sink: Sink) -> dict[str, Received]:
    found: dict[str, Received] = {}
    for message in sink.messages:
        [recipient] = message.recipients
        assert recipient not in found, f"{recipient} was mailed twice"
        found[recipient] = message
    return found


async def test_each_member_is_mailed_once_and_the_skipped_are_counted(settings: Settings) -> None:
    async with world(settings) as w:
        topic = await w.call(
            "POST", "/topics", 201, json={"name": "News", "default_subscription": "opt_in"}
        )
        segment_id = await w.segment()
        members = {
            "ann@example.com": {"first_name": "Ann", "properties": {"plan": "pro"}},
            "bob@example.com": {"unsubscribed": True},
            "cat@example.com": {},
            "dan@example.com": {"topics": [{"id": topic["id"], "subscription": "opt_out"}]},
            "eve@example.com": {"properties": {"plan": "free\r\nBcc: evil@example.com"}},
        }
        for address, fields in members.items():
            await w.contact(address, segments=[segment_id], **fields)
        await w.call("POST", "/suppressions", 201, json={"email": "cat@example.com"})
        created = await w.broadcast(
            segment_id,
            topic_id=topic["id"],
            subject="Hi {{contact.first_name}}, plan {{contact.properties.plan}}",
            text="Dear {{contact.first_name}} {{contact.email}}: {{contact.properties.plan}}",
        )
        assert created["status"] == "draft" and created["stream_id"] == "broadcast"
        async with running_worker(w.services):
            sent = await w.call("POST", f"/broadcasts/{created['id']}/send")
            assert sent["status"] == "sending"
            final = await w.finished(created["id"])
        counts = {k: final[k] for k in ("recipients", "sent", "failed")}
        assert counts == {"recipients": 5, "sent": 2, "failed": 0}
        assert final["skipped_unsubscribed"] == final["skipped_suppressed"] == 1
        assert final["skipped_topic"] == 1 and final["sent_at"] is not None
        mailed = by_recipient(w.sink)
        assert sorted(mailed) == ["ann@example.com", "eve@example.com"]
        assert header(mailed["ann@example.com"], "Subject") == "Hi Ann, plan pro"
        # A contact value's line break cannot add a header: the subject stays one line.
        assert (
            header(mailed["eve@example.com"], "Subject") == "Hi , plan free Bcc: evil@example.com"
        )
        eve = email.message_from_bytes(mailed["eve@example.com"].data, policy=email.policy.default)
        assert eve["Bcc"] is None
        text = eve.get_body(("plain",))
        assert text is not None and "free\r\nBcc: evil@example.com" in text.get_content()


async def test_the_delivered_header_unsubscribes_in_one_click(settings: Settings) -> None:
    async with world(settings) as w:
        segment_id = await w.segment("ann@example.com", "bob@example.com")
        created = await w.broadcast(segment_id, send=True)
        assert created["status"] == "sending"
        async with running_worker(w.services):
            await w.finished(created["id"])
        message = by_recipient(w.sink)["ann@example.com"]
        # dkimpy verifies the signature, and it covers both list headers.
        assert dkim.verify(message.data, dnsfunc=published_txt)
        signature = header(message, "DKIM-Signature").replace(" ", "").replace("\n", "")
        signed = signature.split("h=")[1].split(";")[0].lower().split(":")
        assert {"list-unsubscribe", "list-unsubscribe-post"} <= set(signed)
        assert header(message, "List-Unsubscribe-Post") == "List-Unsubscribe=One-Click"
        https, mailto = [
            part.strip(" <>") for part in header(message, "List-Unsubscribe").split(",")
        ]
        token = https.rsplit("/", 1)[1]
        assert https.startswith(w.services.settings.public_url) and "/unsubscribe/" in https
        assert mailto == f"mailto:unsubscribe+{token}@send.acme.test"
        html = email.message_from_bytes(message.data, policy=email.policy.default).get_body(
            ("html",)
        )
        assert html is not None and https in html.get_content()

        path = urlsplit(https).path
        page = await w.client.get(path)
        assert page.status_code == 200 and "ann@example.com" in page.text
        assert (await w.call("GET", "/contacts/ann@example.com"))["unsubscribed"] is False

        one_click = {"content": b"List-Unsubscribe=One-Click", "headers": FORM}
        for _ in range(2):  # idempotent
            answer = await w.client.post(path, **one_click)
            assert answer.status_code == 200 and "You are unsubscribed" in answer.text
        assert (await w.call("GET", "/contacts/ann@example.com"))["unsubscribed"] is True
        assert (await w.call("GET", "/contacts/bob@example.com"))["unsubscribed"] is False
        async with w.services.db.read() as tx:
            updates = await events_of(tx, w.tenant.team.id, "contact.updated")
        assert [e["email"] for e in updates] == ["ann@example.com"]


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def altered(token: str) -> list[str]:
    """Every one-character change of ``token``, and a few more damaged forms."""
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    changed = [
        token[:i] + next(c for c in alphabet if c != token[i]) + token[i + 1 :]
        for i in range(len(token))
    ]
    return [*changed, token[:-1], token + "a", token.upper() + "!", "x"]


async def test_a_forged_or_altered_token_changes_nothing(settings: Settings) -> None:
    async with world(settings) as w:
        segment_id = await w.segment("ann@example.com", "bob@example.com")
        ann = await w.call("GET", "/contacts/ann@example.com")
        bob = await w.call("GET", "/contacts/bob@example.com")
        links = w.services.broadcasts.links
        token = links.token(w.tenant.team.id, ann["id"])
        bob_token = links.token(w.tenant.team.id, bob["id"])
        # Ann's MAC on Bob's id: the token does not carry over to another contact.
        swapped = bob_token[:26] + token[26:]
        other = await make_tenant(w.services)
        foreign = links.token(other.team.id, ann["id"])  # made for another team
        for bad in [*altered(token), swapped, foreign]:
            for method in ("GET", "POST"):
                answer = await w.client.request(
                    method, f"/unsubscribe/{bad}", content=b"List-Unsubscribe=One-Click",
                    headers=FORM,
                )  # fmt: skip
                assert answer.status_code == 404, (bad, answer.text)
                assert answer.json()["name"] == "not_found"
        for contact in ("ann@example.com", "bob@example.com"):
            assert (await w.call("GET", f"/contacts/{contact}"))["unsubscribed"] is False
        assert segment_id


async def test_the_page_saves_topic_choices(settings: Settings) -> None:
    async with world(settings) as w:
        news = await w.call(
            "POST", "/topics", 201, json={"name": "<b>News</b>", "default_subscription": "opt_in"}
        )
        offers = await w.call(
            "POST", "/topics", 201, json={"name": "Offers", "default_subscription": "opt_out"}
        )
        contact_id = await w.contact("ann@example.com")
        path = f"/unsubscribe/{w.services.broadcasts.links.token(w.tenant.team.id, contact_id)}"
        page = await w.client.get(path)
        assert "&lt;b&gt;News&lt;/b&gt;" in page.text and "<b>News</b>" not in page.text
        assert page.headers["content-type"].startswith("text/html")
        saved = await w.client.post(
            path, content=f"action=topics&topic={offers['id']}".encode(), headers=FORM
        )
        assert saved.status_code == 200 and "Your choices are saved" in saved.text
        mine = await w.call("GET", f"/contacts/{contact_id}/topics")
        chosen = {t["id"]: t["subscription"] for t in mine["data"]}
        assert chosen == {news["id"]: "opt_out", offers["id"]: "opt_in"}
        assert (await w.call("GET", f"/contacts/{contact_id}"))["unsubscribed"] is False


async def claim(services: Services) -> Job:
    async with services.db.transaction() as tx:
        [job] = await jobs_repo.claim(tx, [JobKind.EXPAND_BROADCAST], "test", now_ms(), 0, 1)
    return job


class Crash(Exception):
    """The worker dies after the chunk's work, before its transaction commits."""


async def test_an_interrupted_expansion_resumes_and_mails_everyone_once(
    settings: Settings,
) -> None:
    members = [f"m{n}@example.com" for n in range(7)]
    async with world(settings, chunk_size=2) as w:
        segment_id = await w.segment(*members)
        created = await w.broadcast(segment_id, send=True)
        job = await claim(w.services)  # leased for 0 ms: due again as soon as it is dropped
        broadcasts = w.services.broadcasts
        async with w.services.db.transaction() as tx:
            assert (
                await broadcasts.store_chunk(tx, job, await broadcasts.read_chunk(job)) is Step.NEXT
            )
        with pytest.raises(Crash):
            async with w.services.db.transaction() as tx:
                await broadcasts.store_chunk(tx, job, await broadcasts.read_chunk(job))
                raise Crash
        stale = await broadcasts.read_chunk(job)  # read, then another worker moves the cursor
        async with w.services.db.transaction() as tx:
            assert (
                await broadcasts.store_chunk(tx, job, await broadcasts.read_chunk(job)) is Step.NEXT
            )
        async with w.services.db.transaction() as tx:
            assert await broadcasts.store_chunk(tx, job, stale) is Step.STALE
        halfway = await w.get(created["id"])
        assert (halfway["recipients"], halfway["sent"]) == (4, 4)
        async with running_worker(w.services):
            final = await w.finished(created["id"])
        assert (final["recipients"], final["sent"]) == (7, 7)
        assert sorted(by_recipient(w.sink)) == sorted(members)


async def test_cancel_stops_what_was_not_yet_accepted(settings: Settings) -> None:
    members = [f"m{n}@example.com" for n in range(6)]
    async with world(settings, chunk_size=2) as w:
        segment_id = await w.segment(*members)
        created = await w.broadcast(segment_id, send=True)
        job = await claim(w.services)
        broadcasts = w.services.broadcasts
        async with w.services.db.transaction() as tx:
            assert (
                await broadcasts.store_chunk(tx, job, await broadcasts.read_chunk(job)) is Step.NEXT
            )
        read_before = await broadcasts.read_chunk(job)
        cancelled = await w.call("POST", f"/broadcasts/{created['id']}/cancel")
        assert cancelled["status"] == "cancelled"
        async with w.services.db.transaction() as tx:  # the next chunk, read before the cancel
            assert await broadcasts.store_chunk(tx, job, read_before) is Step.DONE
        async with running_worker(w.services):
            final = await w.finished(created["id"], "cancelled")
        assert (final["recipients"], final["sent"]) == (2, 2)
        assert sorted(by_recipient(w.sink)) == members[:2]
        again = await w.client.post(
            f"/broadcasts/{created['id']}/cancel", headers=w.tenant.headers("live")
        )
        assert again.status_code == 409 and again.json()["name"] == "conflict"


async def test_a_scheduled_broadcast_starts_at_its_time(settings: Settings) -> None:
    async with world(settings) as w:
        segment_id = await w.segment("ann@example.com")
        created = await w.broadcast(segment_id)
        at = now_ms() + 3000  # ahead of the request to schedule it, on a loaded machine too
        async with running_worker(w.services):
            scheduled = await w.call(
                "POST", f"/broadcasts/{created['id']}/send", json={"scheduled_at": format_ms(at)}
            )
            assert scheduled["status"] == "scheduled"
            assert scheduled["scheduled_at"] == format_ms(at)
            final = await w.finished(created["id"])
        emails = await w.call("GET", "/emails")
        [sent] = emails["data"]
        assert sent["broadcast_id"] == created["id"] and sent["origin"] == "broadcast"
        assert sent["created_at"] >= format_ms(at) and final["sent"] == 1


async def test_the_daily_quota_pauses_a_broadcast(settings: Settings) -> None:
    members = [f"m{n}@example.com" for n in range(5)]
    async with world(settings, daily_quota=3) as w:
        segment_id = await w.segment(*members)
        created = await w.broadcast(segment_id, send=True)
        async with running_worker(w.services):

            async def paused() -> bool:
                return (await w.get(created["id"]))["resumes_at"] is not None

            await eventually(paused, what="the broadcast paused by the quota")
        record = await w.get(created["id"])
        assert record["status"] == "sending" and "quota" in record["error"]
        assert (record["recipients"], record["sent"]) == (3, 3)
        async with w.services.db.read() as tx:
            due = await jobs_repo.next_due_at(tx, [JobKind.EXPAND_BROADCAST])
        assert format_ms(due) == record["resumes_at"]
        assert record["resumes_at"].endswith("T00:00:00.000Z")


async def test_drafts_are_edited_and_deleted_until_sent(
    services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = tenant.headers()
    segment = (await client.post("/segments", json={"name": "S"}, headers=headers)).json()
    body = {"audience_id": segment["id"], "from": "a@acme.test", "subject": "One", "text": "x"}
    created = await client.post("/broadcasts", json=body, headers=headers)
    assert created.status_code == 201 and created.json()["segment_id"] == segment["id"]
    broadcast_id = created.json()["id"]
    edited = await client.patch(
        f"/broadcasts/{broadcast_id}", json={"subject": "Two", "name": "Weekly"}, headers=headers
    )
    assert edited.status_code == 200
    assert (edited.json()["subject"], edited.json()["name"], edited.json()["text"]) == (
        "Two", "Weekly", "x",
    )  # fmt: skip
    listed = (await client.get("/broadcasts", headers=headers)).json()
    assert [b["id"] for b in listed["data"]] == [broadcast_id]
    sent = await client.post(f"/broadcasts/{broadcast_id}/send", headers=headers)
    assert sent.status_code == 200 and sent.json()["status"] == "sending"
    for method, extra in (("PATCH", {"json": {"subject": "Three"}}), ("DELETE", {})):
        refused = await client.request(
            method, f"/broadcasts/{broadcast_id}", headers=headers, **extra
        )
        assert refused.status_code == 409 and refused.json()["name"] == "conflict"
    again = await client.post(f"/broadcasts/{broadcast_id}/send", headers=headers)
    assert again.status_code == 409
    draft = (await client.post("/broadcasts", json=body, headers=headers)).json()
    assert (
        await client.post(f"/broadcasts/{draft['id']}/cancel", headers=headers)
    ).status_code == 409
    gone = await client.delete(f"/broadcasts/{draft['id']}", headers=headers)
    assert gone.json() == {"object": "broadcast", "id": draft["id"], "deleted": True}
    assert (await client.get(f"/broadcasts/{draft['id']}", headers=headers)).status_code == 404
    other = await make_tenant(services)
    hidden = await client.get(f"/broadcasts/{broadcast_id}", headers=other.headers())
    assert hidden.status_code == 404


@pytest.mark.parametrize(
    ("fields", "status", "name", "named"),
    [
        ({"segment_id": None}, 422, "validation_error", "'segment_id'"),
        (
            {"segment_id": "0190b2a4-7d0e-7000-8000-000000000000"},
            422,
            "validation_error",
            "segment",
        ),
        ({"topic_id": "0190b2a4-7d0e-7000-8000-000000000000"}, 422, "validation_error", "topic"),
        ({"template": "nope"}, 422, "validation_error", "'nope'"),
        ({"stream_id": "nope"}, 422, "validation_error", "'nope'"),
        ({"from": "not an address"}, 422, "validation_error", "'from'"),
        ({"subject": "a\r\nBcc: x@example.com"}, 422, "validation_error", "subject"),
        ({"scheduled_at": "2030-01-01T00:00:00Z"}, 422, "validation_error", "'send'"),
        ({"send": True, "subject": None, "html": None}, 422, "validation_error", "subject"),
        ({"send": True, "html": "{{missing}}"}, 422, "validation_error", "missing"),
        ({"send": True, "scheduled_at": "in 1 min"}, 422, "validation_error", "RFC 3339"),
        ({"from": "a@unverified.test"}, 403, "domain_not_verified", "unverified.test"),
    ],
)
async def test_invalid_broadcasts_are_refused_and_nothing_is_stored(
    client: httpx.AsyncClient,
    tenant: Tenant,
    fields: dict[str, Any],
    status: int,
    name: str,
    named: str,
) -> None:
    headers = tenant.headers("live")
    segment = (await client.post("/segments", json={"name": "S"}, headers=headers)).json()
    body = {
        "segment_id": segment["id"], "from": "a@unverified.test", "subject": "Hi", "html": "x",
    }  # fmt: skip
    if "from" not in fields and status != 403:
        headers = tenant.headers("test")  # test keys send from any domain
    answer = await client.post("/broadcasts", json={**body, **fields}, headers=headers)
    assert answer.status_code == status, answer.text
    assert answer.json()["name"] == name and named in answer.json()["message"]
    listed = await client.get("/broadcasts", headers=headers)
    assert listed.json()["data"] == []
