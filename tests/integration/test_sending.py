"""The send path: every check, in order, and nothing half-stored when one fails."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.idempotency import idempotency_key
from posthaste.core.ids import format_ms, now_ms
from posthaste.core.models import Email, KeyMode, Origin, Principal, Sender
from posthaste.core.send_request import SendRequest, parse_send_request
from posthaste.core.serialize import email_record
from posthaste.core.status import EmailStatus
from posthaste.core.suppressions import parse_suppressed_address
from posthaste.errors import (
    DailyQuotaExceeded,
    DomainNotVerified,
    InvalidIdempotentRequest,
    PosthasteError,
    RecipientSuppressed,
    ValidationError,
)
from posthaste.services.idempotency import Replay
from posthaste.storage import tables
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body as body
from tests.senders import AnySender


async def principal(services: Services, token: str) -> Principal:
    return await services.api_keys.authenticate(token)


async def accept(services: Services, who: Principal, request_body: object) -> Email:
    """What ``POST /emails`` does: parse at the edge, then the one call."""
    request = parse_send_request(request_body, now_ms())
    email = await services.sending.accept(who.sender, Origin.API, request)
    assert isinstance(email, Email)
    return email


async def accept_batch(
    services: Services, who: Principal, bodies: list[Any]
) -> list[Email | PosthasteError]:
    """What ``POST /emails/batch`` does: each item parsed on its own, then the one call."""
    now = now_ms()
    items: list[SendRequest | PosthasteError] = []
    for item in bodies:
        try:
            items.append(parse_send_request(item, now))
        except PosthasteError as exc:
            items.append(exc)
    return await services.sending.accept_batch(who.sender, Origin.BATCH, items)


async def row_counts(services: Services) -> dict[str, int]:
    counts = {}
    async with services.db.read() as tx:
        for table in (
            tables.emails,
            tables.email_recipients,
            tables.email_tags,
            tables.events,
            tables.jobs,
            tables.attachments,
            tables.blobs,
        ):
            counts[table.name] = (
                await tx.conn.execute(select(func.count()).select_from(table))
            ).scalar_one()
    return counts


async def test_accept_stores_email_event_and_job_together(
    services: Services, tenant: Tenant
) -> None:
    who = await principal(services, tenant.test)
    attachment = {
        "filename": "a.txt",
        "content_type": "text/plain",
        "content": base64.b64encode(b"hello").decode(),
    }
    email = await accept(
        services, who, body(tags={"k": "v"}, attachments=[attachment], cc=["c@example.com"])
    )
    assert email.status is EmailStatus.QUEUED
    assert email.message_id.endswith("@acme.test>")
    counts = await row_counts(services)
    assert counts == {
        "emails": 1,
        "email_recipients": 2,
        "email_tags": 1,
        "events": 1,
        "jobs": 1,
        "attachments": 1,
        "blobs": 1,
    }


@pytest.mark.parametrize(
    ("overrides", "error", "fragment"),
    [
        ({"to": "not-an-address"}, ValidationError, "to"),
        ({"from": None}, ValidationError, "from"),
        ({"stream_id": "nope"}, ValidationError, "stream"),
        ({"template": "welcome"}, ValidationError, "welcome"),
        (
            {"attachments": [{"filename": "a", "content_type": "text/plain", "content": "***"}]},
            ValidationError,
            "base64",
        ),
        ({"headers": {"X-Evil": "a\r\nBcc: victim@example.com"}}, ValidationError, "X-Evil"),
    ],
)
async def test_a_failing_check_stores_nothing(
    services: Services,
    tenant: Tenant,
    overrides: dict[str, Any],
    error: type[PosthasteError],
    fragment: str,
) -> None:
    who = await principal(services, tenant.test)
    before = await row_counts(services)
    with pytest.raises(error) as caught:
        await accept(services, who, body(**overrides))
    assert fragment in caught.value.message
    assert await row_counts(services) == before


async def test_live_keys_cannot_send_from_unverified_domains(
    services: Services, tenant: Tenant
) -> None:
    who = await principal(services, tenant.live)
    with pytest.raises(DomainNotVerified):
        await accept(services, who, body())
    assert (await row_counts(services))["emails"] == 0


async def test_suppressed_recipient_is_refused_by_name(services: Services, tenant: Tenant) -> None:
    who = await principal(services, tenant.test)
    await services.suppressions.add(who, parse_suppressed_address("Blocked@Example.com"))
    with pytest.raises(ValidationError) as caught:
        await accept(services, who, body(to=["ok@example.com"], bcc="blocked@example.COM"))
    assert "blocked@example.com" in caught.value.message
    assert (await row_counts(services))["emails"] == 0


async def test_suppressions_are_per_team(services: Services, tenant: Tenant) -> None:
    other = await make_tenant(services)
    await services.suppressions.add(
        await principal(services, other.test), parse_suppressed_address("user@example.com")
    )
    email = await accept(services, await principal(services, tenant.test), body())
    assert email.status is EmailStatus.QUEUED


async def test_batch_items_fail_independently_and_the_rest_are_stored(
    services: Services, tenant: Tenant
) -> None:
    who = await principal(services, tenant.test)
    await services.suppressions.add(who, parse_suppressed_address("gone@example.com"))
    outcomes = await accept_batch(
        services,
        who,
        [
            body(),
            body(to="gone@example.com"),
            "not an object",
            body(to="x@example.com"),
        ],
    )
    assert [type(o).__name__ for o in outcomes] == [
        "Email",
        "RecipientSuppressed",
        "ValidationError",
        "Email",
    ]
    assert [getattr(o, "name", None) for o in outcomes[1:3]] == ["validation_error"] * 2
    assert (await row_counts(services))["emails"] == 2


async def test_daily_quota_counts_every_accepted_email(services: Services) -> None:
    tenant = await make_tenant(services, daily_quota=3)
    who = await principal(services, tenant.test)
    await accept(services, who, body())
    outcomes = await accept_batch(services, who, [body(), body(), body()])
    assert [isinstance(o, DailyQuotaExceeded) for o in outcomes] == [False, False, True]
    with pytest.raises(DailyQuotaExceeded) as caught:
        await accept(services, who, body())
    assert caught.value.retry_after > 0
    assert (await row_counts(services))["emails"] == 3


async def test_scheduled_at_rules(services: Services, tenant: Tenant) -> None:
    who = await principal(services, tenant.test)
    soon = format_ms(now_ms() + 3_600_000)
    email = await accept(services, who, body(scheduled_at=soon))
    assert email.status is EmailStatus.SCHEDULED and format_ms(email.scheduled_at) == soon
    async with services.db.read() as tx:
        due = (await tx.conn.execute(select(tables.jobs.c.available_at))).scalar_one()
    assert due == email.scheduled_at
    past = await accept(services, who, body(scheduled_at="2001-01-01T00:00:00+02:00"))
    assert past.status is EmailStatus.QUEUED and past.scheduled_at is None
    with pytest.raises(ValidationError, match="30 days"):
        await accept(services, who, body(scheduled_at=format_ms(now_ms() + 31 * 86_400_000)))
    with pytest.raises(ValidationError, match="time zone"):
        await accept(services, who, body(scheduled_at="2030-01-01T00:00:00"))


async def test_concurrent_sends_of_two_teams_each_get_their_own_outcome(
    services: Services, tenant: Tenant
) -> None:
    """Sends that share a group-committed transaction keep their own checks and results."""
    other = await make_tenant(services, daily_quota=2)
    mine, theirs = await principal(services, tenant.test), await principal(services, other.test)
    third = await principal(services, (await make_tenant(services)).test)
    await services.suppressions.add(mine, parse_suppressed_address("blocked@example.com"))
    calls = [accept(services, mine, body(to=f"user{n}@example.com")) for n in range(10)] + [
        accept(services, mine, body(to="blocked@example.com")),
        accept(services, mine, body(to="not an address")),
        accept_batch(services, theirs, [body(), body(), body()]),
        accept(services, third, body(to="blocked@example.com")),  # not on its list
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    stored = outcomes[:10]
    assert all(not isinstance(o, BaseException) for o in stored)
    assert len({o.id for o in stored if not isinstance(o, BaseException)}) == 10
    assert isinstance(outcomes[10], ValidationError) and "suppression" in str(outcomes[10])
    assert isinstance(outcomes[11], ValidationError)
    batch = outcomes[12]
    assert isinstance(batch, list)
    assert [type(o).__name__ for o in batch] == ["Email", "Email", "DailyQuotaExceeded"]
    assert not isinstance(outcomes[13], BaseException)  # suppression lists are per team
    counts = await row_counts(services)
    assert counts["emails"] == counts["jobs"] == 13
    assert counts["events"] == 13 + 1  # each email's first event, and the suppression.added


async def test_each_entry_point_is_stored_as_the_origin(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    h = tenant.headers()
    single = (await client.post("/emails", json=body(), headers=h)).json()
    [item] = (await client.post("/emails/batch", json=[body()], headers=h)).json()["data"]
    assert single["origin"] == "api"
    assert (await client.get(f"/emails/{item['id']}", headers=h)).json()["origin"] == "batch"
    async with services.db.read() as tx:
        rows = (await tx.conn.execute(select(tables.emails.c.id, tables.emails.c.origin))).all()
    assert dict(rows) == {single["id"]: "api", item["id"]: "batch"}


async def test_a_system_sender_sends_live_mail_checked_like_any_other(
    settings: Settings, tenant: Tenant
) -> None:
    """Broadcasts and automations send for a team without an API key: live mail, so the
    domain must be one the team may send from, and every other check applies too."""
    request = parse_send_request(body(), now_ms())
    system = Sender(tenant.team)
    built = build_services(settings)
    try:
        with pytest.raises(DomainNotVerified):
            await built.sending.accept(system, Origin.BROADCAST, request)
    finally:
        await built.close()
    anywhere = build_services(settings, senders=AnySender("us-east-1"))
    try:
        email = await anywhere.sending.accept(system, Origin.BROADCAST, request)
        assert isinstance(email, Email)
        assert (email.mode, email.origin) == (KeyMode.LIVE, Origin.BROADCAST)
        await anywhere.suppressions.add(
            await principal(anywhere, tenant.test), parse_suppressed_address("user@example.com")
        )
        with pytest.raises(RecipientSuppressed):
            await anywhere.sending.accept(system, Origin.AUTOMATION, request)
        stored = await anywhere.emails.get(await principal(anywhere, tenant.test), email.id)
        assert stored.origin is Origin.BROADCAST
    finally:
        await anywhere.close()


async def test_an_idempotency_key_is_reserved_replayed_and_released_by_accept(
    services: Services, tenant: Tenant
) -> None:
    who = await principal(services, tenant.test)
    request = parse_send_request(body(), now_ms())
    key = idempotency_key("k-1", "fingerprint-a")
    first = await services.sending.accept(who.sender, Origin.API, request, idempotency=key)
    again = await services.sending.accept(who.sender, Origin.API, request, idempotency=key)
    assert isinstance(first, Email) and isinstance(again, Replay)
    assert again.id == first.id and orjson.loads(again.body) == email_record(first)
    with pytest.raises(InvalidIdempotentRequest):
        other = idempotency_key("k-1", "fingerprint-b")
        await services.sending.accept(who.sender, Origin.API, request, idempotency=other)
    # A request the send path refuses gives its key back: a corrected retry may use it.
    await services.suppressions.add(who, parse_suppressed_address("user@example.com"))
    refused = idempotency_key("k-2", "fingerprint-c")
    with pytest.raises(RecipientSuppressed):
        await services.sending.accept(who.sender, Origin.API, request, idempotency=refused)
    await services.suppressions.remove(who, "user@example.com")
    retried = await services.sending.accept(who.sender, Origin.API, request, idempotency=refused)
    assert isinstance(retried, Email) and retried.id != first.id
    assert (await row_counts(services))["emails"] == 2


class _GatedContent:
    """The real content resolver, but an item whose subject is ``gated`` waits for ``open``:
    a batch group held in its checks for as long as the test likes. ``resolved``: the items'
    subjects in the order their checks got past the gate."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.open = asyncio.Event()
        self.waiting = asyncio.Event()
        self.resolved: list[str | None] = []

    async def resolve(self, tx: Any, sender: Sender, request: SendRequest) -> Any:
        if request.subject == "gated":
            self.waiting.set()
            await self.open.wait()
        self.resolved.append(request.subject)
        return await self.real.resolve(tx, sender, request)

    @classmethod
    def installed(cls, services: Services, monkeypatch: pytest.MonkeyPatch) -> _GatedContent:
        """The gate, in place of ``services``' content resolver for the test."""
        gated = cls(services.sending.content)
        monkeypatch.setattr(services.sending, "content", gated)
        return gated


async def test_a_lone_email_is_stored_while_a_batch_group_is_still_being_checked(
    services: Services, tenant: Tenant, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls of one email group in a lane of their own: a lone ``POST /emails`` (or relayed
    message) is not queued behind a group of batch items, whose checks may take tens of
    milliseconds. Without the lanes this send would wait for the batch (a timeout here)."""
    if backend == "sqlite":
        pytest.skip("SQLite's writers take turns: a group holds the write lock from its start")
    gated = _GatedContent.installed(services, monkeypatch)
    who = await principal(services, tenant.test)
    batch = asyncio.create_task(accept_batch(services, who, [body(subject="gated"), body()]))
    await asyncio.wait_for(gated.waiting.wait(), 30)  # the batch's group is in its checks
    lone = await asyncio.wait_for(accept(services, who, body(subject="alone")), 30)
    assert lone.status is EmailStatus.QUEUED and not batch.done()
    gated.open.set()
    outcomes = await asyncio.wait_for(batch, 30)
    assert [type(o).__name__ for o in outcomes] == ["Email", "Email"]
    counts = await row_counts(services)
    assert counts["emails"] == counts["jobs"] == 3


async def test_a_second_batch_is_stored_while_the_first_is_still_being_checked(
    services: Services, tenant: Tenant, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL two groups of batch items may be in flight at once
    (``BATCH_GROUPS_IN_FLIGHT``): a batch arriving while another's group is being checked is
    stored without waiting for it (without it, a timeout here). SQLite has one writer: there the
    second batch's group starts only after the first one's."""
    gated = _GatedContent.installed(services, monkeypatch)
    who = await principal(services, tenant.test)
    first = asyncio.create_task(
        accept_batch(services, who, [body(subject="gated"), body(subject="first")])
    )
    await asyncio.wait_for(gated.waiting.wait(), 30)  # the first group is in its checks
    second = asyncio.create_task(accept_batch(services, who, [body(subject="second")] * 2))
    if backend != "sqlite":
        await asyncio.wait_for(second, 30)
        assert not first.done()
    gated.open.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, second), 30)
    assert [[type(o).__name__ for o in batch] for batch in outcomes] == [["Email"] * 2] * 2
    alongside, one_after_the_other = (
        ["second"] * 2 + ["gated", "first"],
        ["gated", "first"] + ["second"] * 2,
    )
    assert gated.resolved == (one_after_the_other if backend == "sqlite" else alongside)
    counts = await row_counts(services)
    assert counts["emails"] == counts["jobs"] == 4


async def test_concurrent_batches_of_one_team_fill_its_daily_quota_exactly(
    services: Services,
) -> None:
    """Batches whose groups run at once count one team's quota in turn: exactly the quota is
    accepted, every other item is refused with the quota's error, and nothing deadlocks."""
    tenant = await make_tenant(services, daily_quota=25)
    who = await principal(services, tenant.test)
    batches = await asyncio.wait_for(
        asyncio.gather(*(accept_batch(services, who, [body()] * 10) for _ in range(6))), 60
    )
    outcomes = [outcome for batch in batches for outcome in batch]
    assert sum(isinstance(o, Email) for o in outcomes) == 25
    assert sum(isinstance(o, DailyQuotaExceeded) for o in outcomes) == 35
    counts = await row_counts(services)
    assert counts["emails"] == counts["jobs"] == 25
