"""A call of one email (``POST /emails``, a relayed message: the send path's lone lane) has its
suppression check made with the writes that store it (``emails.store_rows`` with
``unless_listed``): on SQLite in their one hop to the connection's thread, on PostgreSQL as a
query of its own just before the storing statement. A listed recipient is refused exactly as
by the check of step 3: the same error, nothing stored, no one woken, its idempotency key
given back; the other sends of its group are stored."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.idempotency import idempotency_key
from posthaste.core.ids import now_ms
from posthaste.core.models import Email, Origin, Principal
from posthaste.core.send_request import parse_send_request
from posthaste.core.suppressions import parse_suppressed_address
from posthaste.errors import RecipientSuppressed
from posthaste.storage import bulk
from posthaste.storage.database import EVENTS_CHANNEL, JOBS_CHANNEL, WEBHOOKS_CHANNEL, Tx
from posthaste.storage.tables import (
    blobs,
    email_recipients,
    emails,
    events,
    idempotency_keys,
    jobs,
    webhook_deliveries,
    webhooks,
)
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body as body
from tests.integration.rows import webhook_row

REFUSAL = (
    "The recipient {} is on the suppression list; remove it from /suppressions to send to it again."
)
STORED_BY_A_SEND = (emails, email_recipients, events, jobs, blobs, webhook_deliveries)


async def _who(services: Services, tenant: Tenant) -> Principal:
    return await services.api_keys.authenticate(tenant.test)


async def _accept(services: Services, who: Principal, request_body: Any, **kwargs: Any) -> Email:
    request = parse_send_request(request_body, now_ms())
    email = await services.sending.accept(who.sender, Origin.API, request, **kwargs)
    assert isinstance(email, Email)
    return email


async def _counts(services: Services) -> list[int]:
    """Rows of every table a send writes, and of the idempotency keys."""
    found = []
    async with services.db.read() as tx:
        for table in (*STORED_BY_A_SEND, idempotency_keys):
            query = select(func.count()).select_from(table)
            if table is events:  # the suppression.added events are the list's
                query = query.where(events.c.type.like("email.%"))
            found.append(int((await tx.conn.execute(query)).scalar_one()))
    return found


async def _suppress(services: Services, who: Principal, *addresses: str) -> None:
    for address in addresses:
        await services.suppressions.add(who, parse_suppressed_address(address))


async def _subscribe(services: Services, team_id: str) -> None:
    """An endpoint for every queued email: a stored send fans out one delivery."""
    row = webhook_row(team_id, ["email.queued"])
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, webhooks, [row])


def _listen(services: Services) -> dict[str, asyncio.Event]:
    heard = {c: asyncio.Event() for c in (JOBS_CHANNEL, EVENTS_CHANNEL, WEBHOOKS_CHANNEL)}
    for channel, flag in heard.items():
        services.db.add_listener(channel, flag.set)
    return heard


@pytest.fixture
async def deaf(settings: Settings) -> AsyncIterator[Services]:
    """Services on the same database hearing no other connection (nor their own NOTIFYs of
    the set-up): what wakes is what the send under test woke, at its commit."""
    deaf = build_services(settings)
    yield deaf
    await deaf.close()


async def test_a_suppressed_lone_send_is_refused_and_stores_and_wakes_nothing(
    services: Services, deaf: Services, tenant: Tenant
) -> None:
    who = await _who(services, tenant)
    await _subscribe(services, tenant.team.id)
    await _suppress(services, who, "Blocked@Example.com")
    heard = _listen(deaf)
    with pytest.raises(RecipientSuppressed) as caught:
        await _accept(deaf, who, body(to=["ok@example.com"], bcc="blocked@example.COM"))
    assert caught.value.message == REFUSAL.format("blocked@example.com")
    assert await _counts(services) == [0, 0, 0, 0, 0, 0, 0]
    assert not [c for c, flag in heard.items() if flag.is_set()]
    await _accept(deaf, who, body(to="ok@example.com"))
    assert await _counts(services) == [1, 1, 1, 1, 0, 1, 0]
    assert all(flag.is_set() for flag in heard.values())


async def test_the_first_listed_recipient_in_order_is_named(
    services: Services, tenant: Tenant
) -> None:
    who = await _who(services, tenant)
    await _suppress(services, who, "b@example.com", "c@example.com")
    with pytest.raises(RecipientSuppressed) as caught:
        await _accept(
            services, who, body(to=["a@example.com", "c@example.com"], cc="b@example.com")
        )
    assert caught.value.message == REFUSAL.format("c@example.com")


async def test_lone_sends_grouped_with_suppressed_ones_are_stored_without_them(
    services: Services, tenant: Tenant
) -> None:
    """Concurrent lone sends share a group: the listed ones are refused, the others stored
    once each, the idempotent ones' keys kept or given back accordingly."""
    who = await _who(services, tenant)
    other = await _who(services, await make_tenant(services))
    await _suppress(services, who, "gone@example.com", "left@example.com")
    plan = [
        (who, "a@example.com", None),
        (who, "gone@example.com", None),
        (who, "b@example.com", "key-b"),
        (other, "gone@example.com", None),  # another team's list
        (who, "left@example.com", "key-left"),
        (who, "c@example.com", None),
    ]
    outcomes = await asyncio.gather(
        *(
            _accept(
                services,
                sender,
                body(to=to),
                idempotency=None if key is None else idempotency_key(key, to),
            )
            for sender, to, key in plan
        ),
        return_exceptions=True,
    )
    refused = [i for i, o in enumerate(outcomes) if isinstance(o, RecipientSuppressed)]
    assert refused == [1, 4]
    assert [str(outcomes[i]) for i in refused] == [
        REFUSAL.format("gone@example.com"),
        REFUSAL.format("left@example.com"),
    ]
    stored = [o for o in outcomes if isinstance(o, Email)]
    assert len(stored) == 4
    assert await _counts(services) == [4, 4, 4, 4, 0, 0, 1]
    async with services.db.read() as tx:
        ids = set((await tx.conn.execute(select(emails.c.id))).scalars())
    assert ids == {email.id for email in stored}
    # The refused call's key was given back: once the address is off the list, it sends.
    await services.suppressions.remove(who, "left@example.com")
    retried = await _accept(
        services,
        who,
        body(to="left@example.com"),
        idempotency=idempotency_key("key-left", "left@example.com"),
    )
    assert retried.id not in ids


async def test_a_large_attachment_to_a_suppressed_recipient_writes_nothing(
    services: Services, tenant: Tenant
) -> None:
    """A blob written apart, in pieces, before the other writes: the check comes first."""
    who = await _who(services, tenant)
    await _suppress(services, who, "gone@example.com")
    content = base64.b64encode(b"x" * (1024 * 1024 + 10)).decode()
    attached = {"attachments": [{"filename": "big.bin", "content": content}]}
    with pytest.raises(RecipientSuppressed):
        await _accept(services, who, {**body(to="gone@example.com"), **attached})
    assert await _counts(services) == [0, 0, 0, 0, 0, 0, 0]
    await _accept(services, who, {**body(to="kept@example.com"), **attached})
    assert await _counts(services) == [1, 1, 1, 1, 1, 0, 0]


async def test_a_team_with_a_quota_is_refused_before_its_quota_is_counted(
    services: Services,
) -> None:
    tenant = await make_tenant(services, daily_quota=1)
    who = await _who(services, tenant)
    await _suppress(services, who, "gone@example.com")
    with pytest.raises(RecipientSuppressed):
        await _accept(services, who, body(to="gone@example.com"))
    await _accept(services, who, body(to="kept@example.com"))  # the quota's one email
    assert (await _counts(services))[0] == 1


async def test_post_emails_to_a_suppressed_recipient_is_a_422_naming_it(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    h = tenant.headers()
    await client.post("/suppressions", json={"email": "Gone@Example.com"}, headers=h)
    response = await client.post("/emails", json=body(to="gone@example.com"), headers=h)
    assert response.status_code == 422
    assert response.json() == {
        "statusCode": 422,
        "name": "validation_error",
        "message": REFUSAL.format("gone@example.com"),
    }


@contextmanager
def _statements(services: Services) -> Iterator[list[str]]:
    """Every statement sent through SQLAlchemy, to asyncpg itself (``Tx.fetch_pg``) or on
    SQLite's connection thread (``Tx.run_sqlite``, one entry per hop) while the block runs."""
    seen: list[str] = []

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if not sql.startswith("PRAGMA"):  # SQLite's commit watch polls beside the send
            seen.append(sql)

    async def fetched(tx: Tx, sql: str, *params: Any, generic: bool = False) -> list[Any]:
        seen.append(sql)
        return await fetch_pg(tx, sql, *params, generic=generic)

    async def hop(tx: Tx, work: Any) -> Any:
        seen.append(f"hop: {getattr(work, 'func', work).__name__}")
        return await run_sqlite(tx, work)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", statement)
    fetch_pg, run_sqlite = Tx.fetch_pg, Tx.run_sqlite
    Tx.fetch_pg = fetched  # type: ignore[method-assign]
    Tx.run_sqlite = hop  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Tx.fetch_pg, Tx.run_sqlite = fetch_pg, run_sqlite  # type: ignore[method-assign]
        event.remove(engine, "before_cursor_execute", statement)


async def test_a_lone_send_checks_and_stores_in_one_hop_on_sqlite_two_statements_on_postgres(
    services: Services, tenant: Tenant, backend: str
) -> None:
    who = await _who(services, tenant)
    await _accept(services, who, body())  # caches filled (the key's team, the sender's domain)
    with _statements(services) as seen:
        await _accept(services, who, body(to="someone@example.com"))
    if backend == "sqlite":
        assert [s for s in seen if not s.startswith(("BEGIN", "COMMIT"))] == [
            "hop: _insert_and_read_endpoints"
        ]
    else:
        [check, store] = seen
        assert re.search(r"FROM suppressions", check) and re.search(r"INSERT INTO emails", store)
