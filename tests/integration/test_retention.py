"""The retention purge: content, raw messages, attachments, events, attempts and webhook records
older than the retention period go; the email rows stay with their status and metadata; mail
still to be sent keeps its content whatever its age; newer mail is untouched."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.ids import format_ms, now_ms
from posthaste.core.jobs import JobKind
from posthaste.services.retention import DAY_MS, PurgeReport, RetentionService
from posthaste.storage import retention as retention_repo
from posthaste.storage.tables import (
    attachments,
    blobs,
    delivery_attempts,
    events,
    jobs,
    webhook_deliveries,
)
from tests.conftest import Tenant
from tests.integration.test_delivery import run_worker, send

PDF = {
    "filename": "report.pdf",
    "content_type": "application/pdf",
    "content": base64.b64encode(b"%PDF-1 report").decode(),
}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, webhook_allow_private=True)  # an endpoint on loopback


async def count(services: Services, table: Any, *where: Any) -> int:
    async with services.db.read() as tx:
        query = select(func.count()).select_from(table).where(*where)
        return int((await tx.conn.execute(query)).scalar() or 0)


async def next_millisecond() -> int:
    """A moment after everything made so far: ids minted from now on sort above its floor."""
    start = now_ms()
    while now_ms() <= start:  # noqa: ASYNC110 - the clock itself is what is waited for
        await asyncio.sleep(0.001)
    return now_ms()


async def make_due(services: Services) -> None:
    async with services.db.transaction() as tx:
        query = jobs.update().where(jobs.c.kind == JobKind.PURGE).values(available_at=0)
        await tx.conn.execute(query)


async def purge_job(services: Services) -> tuple[str, int]:
    async with services.db.read() as tx:
        query = select(jobs.c.ref, jobs.c.available_at).where(
            jobs.c.kind == JobKind.PURGE, jobs.c.ref.startswith("sent:")
        )
        ref, due = (await tx.conn.execute(query)).one()
        return str(ref), int(due)


async def test_old_content_goes_and_the_email_rows_stay(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    headers = tenant.headers()
    hook = await client.post(
        "/webhooks",
        json={"endpoint": "http://127.0.0.1:9/hook", "events": ["email.sent"]},
        headers=headers,
    )
    assert hook.status_code in (200, 201), hook.text
    old = [await send(client, tenant, text="plain", attachments=[PDF]) for _ in range(5)]
    later = format_ms(now_ms() + 3_600_000)
    waiting = await send(client, tenant, text="scheduled", scheduled_at=later)
    await run_worker(services)
    cut = await next_millisecond()
    new = await send(client, tenant, text="new", attachments=[PDF])
    await run_worker(services)
    assert await count(services, webhook_deliveries) == 6  # email.sent of the 6 sent ones

    # The purge as the worker runs it, with the retention period ending at ``cut``; batches of
    # two, so that it walks several pages and several batches per table.
    services.retention = RetentionService(services.db, 30, batch=2, clock=lambda: cut + 30 * DAY_MS)
    await services.retention.ensure_scheduled()
    await services.retention.ensure_scheduled()  # at most one job per area
    assert await count(services, jobs, jobs.c.kind == JobKind.PURGE) == 2
    await make_due(services)  # enqueued at the purge's own clock, 30 days ahead
    await run_worker(services)

    for email_id in old:
        record = (await client.get(f"/emails/{email_id}", headers=headers)).json()
        assert record["status"] == "delivered" and record["subject"] == "Hello"
        assert record["to"] == ["delivered@simulator.test"]
        assert record["html"] is None and record["text"] is None
        raw = await client.get(f"/emails/{email_id}/raw", headers=headers)
        assert raw.status_code == 404 and "retention" in raw.json()["message"]
        listed = await client.get(f"/emails/{email_id}/attachments", headers=headers)
        assert listed.json()["data"] == []
        assert (await client.get(f"/emails/{email_id}/events", headers=headers)).json()[
            "data"
        ] == []
    # Still to be sent: its content is kept, whatever its age.
    record = (await client.get(f"/emails/{waiting}", headers=headers)).json()
    assert record["status"] == "scheduled" and record["text"] == "scheduled"
    # Newer than the cut: untouched.
    record = (await client.get(f"/emails/{new}", headers=headers)).json()
    assert record["text"] == "new" and record["status"] == "delivered"
    assert (await client.get(f"/emails/{new}/raw", headers=headers)).status_code == 200
    assert len((await client.get(f"/emails/{new}/attachments", headers=headers)).json()["data"])
    assert await count(services, attachments) == 1
    assert await count(services, blobs) == 2  # the new email's attachment and raw message
    assert await count(services, events, events.c.email_id.in_(old)) == 0
    assert await count(services, events, events.c.email_id == new) > 0
    assert await count(services, delivery_attempts, delivery_attempts.c.email_id.in_(old)) == 0
    assert await count(services, delivery_attempts, delivery_attempts.c.email_id == new) == 1
    assert await count(services, webhook_deliveries) == 1  # the new email's

    # The mark stops before the email still to be sent, and the job is due again in an hour.
    ref, due = await purge_job(services)
    mark = ref.removeprefix("sent:")
    assert max(old) <= mark < waiting
    assert due == cut + 30 * DAY_MS + 3_600_000

    # Once sent (here: canceled), a later run purges it too, walking on from the mark.
    canceled = await client.post(f"/emails/{waiting}/cancel", headers=headers)
    assert canceled.status_code == 200, canceled.text
    await make_due(services)
    await run_worker(services)
    record = (await client.get(f"/emails/{waiting}", headers=headers)).json()
    assert record["status"] == "canceled" and record["text"] is None
    ref, _ = await purge_job(services)
    assert ref.removeprefix("sent:") >= waiting


async def test_twin_jobs_are_removed_when_one_runs(services: Services) -> None:
    """Two processes starting at once may each enqueue the job; the first run drops the other."""
    async with services.db.transaction() as tx:
        for _ in range(2):
            await tx.conn.execute(
                jobs.insert().values(
                    kind=JobKind.PURGE, ref="sent:", available_at=0, attempts=0, created_at=0
                )
            )
    await run_worker(services)
    assert await count(services, jobs, jobs.c.kind == JobKind.PURGE) == 1


async def test_the_purge_rests_as_long_as_its_wal_takes_at_the_rate(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    """On PostgreSQL each batch is followed by a rest of the WAL the cluster wrote meanwhile at
    ``wal_rate``, however fast the batch was (every durable commit waits for the log written
    before it); SQLite has no such log, and rests as long as the batch took (here: not at all)."""
    old = [await send(client, tenant, text="plain", attachments=[PDF]) for _ in range(4)]
    await run_worker(services)
    cut = await next_millisecond()
    rate = 2**20  # a MiB a second
    pauses: list[float] = []

    async def rest(seconds: float) -> None:
        pauses.append(seconds)

    purge = RetentionService(
        services.db,
        30,
        batch=2,
        clock=lambda: cut + 30 * DAY_MS,
        rest=0.0,
        wal_rate=rate,
        sleep=rest,
    )
    async with services.db.read() as tx:
        wal_before = await retention_repo.wal_position(tx)
    await purge.purge_sent(None, "", PurgeReport())
    await purge.purge_logs(PurgeReport())
    async with services.db.read() as tx:
        wal_after = await retention_repo.wal_position(tx)

    assert await count(services, events, events.c.email_id.in_(old)) == 0
    assert len(pauses) >= 4  # two pages of emails, then the logs' full batches
    if wal_before is None:  # SQLite
        assert wal_after is None and pauses == [0.0] * len(pauses)
        return
    assert wal_after is not None
    # Every batch changed rows, so wrote some WAL (a deleted row's record alone is tens of
    # bytes) and rested for it; together no more than what the cluster wrote meanwhile.
    assert all(pause >= 64 / rate for pause in pauses), pauses
    assert sum(pauses) * rate <= wal_after - wal_before
