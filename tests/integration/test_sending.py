"""The send path: every check, in order, and nothing half-stored when one fails."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from sqlalchemy import func, select

from posthaste.bootstrap import Services
from posthaste.core.ids import format_ms, now_ms
from posthaste.core.models import Principal
from posthaste.core.status import EmailStatus
from posthaste.errors import DailyQuotaExceeded, DomainNotVerified, PosthasteError, ValidationError
from posthaste.storage import tables
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body as body


async def principal(services: Services, token: str) -> Principal:
    return await services.teams.authenticate(token)


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
    email = await services.sending.accept(
        who, body(tags={"k": "v"}, attachments=[attachment], cc=["c@example.com"])
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
        await services.sending.accept(who, body(**overrides))
    assert fragment in caught.value.message
    assert await row_counts(services) == before


async def test_live_keys_cannot_send_from_unverified_domains(
    services: Services, tenant: Tenant
) -> None:
    who = await principal(services, tenant.live)
    with pytest.raises(DomainNotVerified):
        await services.sending.accept(who, body())
    assert (await row_counts(services))["emails"] == 0


async def test_suppressed_recipient_is_refused_by_name(services: Services, tenant: Tenant) -> None:
    who = await principal(services, tenant.test)
    await services.suppressions.add(who, "Blocked@Example.com")
    with pytest.raises(ValidationError) as caught:
        await services.sending.accept(who, body(to=["ok@example.com"], bcc="blocked@example.COM"))
    assert "blocked@example.com" in caught.value.message
    assert (await row_counts(services))["emails"] == 0


async def test_suppressions_are_per_team(services: Services, tenant: Tenant) -> None:
    other = await make_tenant(services)
    await services.suppressions.add(await principal(services, other.test), "user@example.com")
    email = await services.sending.accept(await principal(services, tenant.test), body())
    assert email.status is EmailStatus.QUEUED


async def test_batch_items_fail_independently_and_the_rest_are_stored(
    services: Services, tenant: Tenant
) -> None:
    who = await principal(services, tenant.test)
    await services.suppressions.add(who, "gone@example.com")
    outcomes = await services.sending.accept_batch(
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
    await services.sending.accept(who, body())
    outcomes = await services.sending.accept_batch(who, [body(), body(), body()])
    assert [isinstance(o, DailyQuotaExceeded) for o in outcomes] == [False, False, True]
    with pytest.raises(DailyQuotaExceeded) as caught:
        await services.sending.accept(who, body())
    assert caught.value.retry_after > 0
    assert (await row_counts(services))["emails"] == 3


async def test_scheduled_at_rules(services: Services, tenant: Tenant) -> None:
    who = await principal(services, tenant.test)
    soon = format_ms(now_ms() + 3_600_000)
    email = await services.sending.accept(who, body(scheduled_at=soon))
    assert email.status is EmailStatus.SCHEDULED and format_ms(email.scheduled_at) == soon
    async with services.db.read() as tx:
        due = (await tx.conn.execute(select(tables.jobs.c.available_at))).scalar_one()
    assert due == email.scheduled_at
    past = await services.sending.accept(who, body(scheduled_at="2001-01-01T00:00:00+02:00"))
    assert past.status is EmailStatus.QUEUED and past.scheduled_at is None
    with pytest.raises(ValidationError, match="30 days"):
        await services.sending.accept(who, body(scheduled_at=format_ms(now_ms() + 31 * 86_400_000)))
    with pytest.raises(ValidationError, match="time zone"):
        await services.sending.accept(who, body(scheduled_at="2030-01-01T00:00:00"))


async def test_concurrent_sends_of_two_teams_each_get_their_own_outcome(
    services: Services, tenant: Tenant
) -> None:
    """Sends that share a group-committed transaction keep their own checks and results."""
    other = await make_tenant(services, daily_quota=2)
    mine, theirs = await principal(services, tenant.test), await principal(services, other.test)
    third = await principal(services, (await make_tenant(services)).test)
    await services.suppressions.add(mine, "blocked@example.com")
    calls = [services.sending.accept(mine, body(to=f"user{n}@example.com")) for n in range(10)] + [
        services.sending.accept(mine, body(to="blocked@example.com")),
        services.sending.accept(mine, body(to="not an address")),
        services.sending.accept_batch(theirs, [body(), body(), body()]),
        services.sending.accept(third, body(to="blocked@example.com")),  # not on its list
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
    assert counts["emails"] == counts["jobs"] == counts["events"] == 13
