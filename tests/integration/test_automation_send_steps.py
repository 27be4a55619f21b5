"""A claimed batch of ``automation_step`` jobs in one transaction: its send steps accepted
together through the send path and still each at most once, its runs going on from step to
step, its writes grouped; on SQLite and PostgreSQL. The test claims the jobs as a worker does
and hands the batch to ``StepRunner.run_steps``."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select, update

from posthaste.bootstrap import Services
from posthaste.core.ids import now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job
from posthaste.storage import bulk
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Tx
from posthaste.storage.tables import automation_run_steps, automation_runs, jobs
from tests.conftest import Tenant, make_tenant

GRAPH = {
    "name": "Welcome",
    "status": "enabled",
    "steps": [
        {"key": "start", "type": "trigger", "config": {"event": "contact.created"}},
        {
            "key": "mail",
            "type": "send_email",
            "config": {"from": "hi@acme.test", "subject": "Hi {{contact.first_name}}", "text": "t"},
        },
    ],
    "connections": [{"from": "start", "to": "mail"}],
}


async def start_runs(
    client: httpx.AsyncClient,
    tenant: Tenant,
    people: list[dict[str, Any]],
    graph: dict[str, Any] = GRAPH,
) -> str:
    """An enabled automation and a contact (so a run) per person; the automation's id."""
    headers = tenant.headers()
    created = await client.post("/automations", json=graph, headers=headers)
    assert created.status_code == 201, created.text
    for person in people:
        response = await client.post("/contacts", json=person, headers=headers)
        assert response.status_code == 201, response.text
    return str(created.json()["id"])


async def claimed(services: Services) -> list[Job]:
    async with services.db.transaction() as tx:
        return await jobs_repo.claim(
            tx, [JobKind.AUTOMATION_STEP], "test-worker", now_ms(), 60_000, 100
        )


async def runs_by_email(
    client: httpx.AsyncClient, tenant: Tenant, automation_id: str
) -> dict[str, dict[str, Any]]:
    """Each run with its steps, by its contact's address."""
    headers = tenant.headers()
    path = f"/automations/{automation_id}/runs"
    found = {}
    for run in (await client.get(path, headers=headers)).json()["data"]:
        detail = (await client.get(f"{path}/{run['id']}", headers=headers)).json()
        contact = await client.get(f"/contacts/{run['contact_id']}", headers=headers)
        found[contact.json()["email"]] = detail
    return found


async def emails_to(client: httpx.AsyncClient, tenant: Tenant, address: str) -> int:
    listed = await client.get("/emails", params={"to": address}, headers=tenant.headers())
    assert listed.status_code == 200, listed.text
    return len(listed.json()["data"])


INSERTS_EMAILS = re.compile(r'INSERT INTO "?emails"? \(', re.IGNORECASE)


async def step_jobs(services: Services) -> list[str]:
    """The runs whose ``automation_step`` job is still queued."""
    query = select(jobs.c.ref).where(jobs.c.kind == JobKind.AUTOMATION_STEP)
    async with services.db.read() as tx:
        return list((await tx.conn.execute(query)).scalars())


@contextmanager
def email_inserts(services: Services) -> Iterator[list[str]]:
    """The statements inserting into ``emails`` while the block runs (on PostgreSQL one that
    also stores their events and jobs, sent to asyncpg itself, ``Tx.fetch_pg``, or through
    SQLAlchemy; on SQLite an ``executemany`` on the connection's thread, with the other inserts
    of its unit, ``bulk.run_sqlite_inserts``)."""
    seen: list[str] = []

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if INSERTS_EMAILS.search(sql):
            seen.append(sql)

    async def fetched(tx: Tx, sql: str, *params: Any, generic: bool = False) -> list[Any]:
        if INSERTS_EMAILS.search(sql):
            seen.append(sql)
        return await fetch_pg(tx, sql, *params, generic=generic)

    def sqlite_inserts(statements: Sequence[bulk.SqliteInsert], connection: Any) -> None:
        seen.extend(sql for sql, _ in statements if INSERTS_EMAILS.search(sql))
        run_sqlite_inserts(statements, connection)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", statement)
    run_sqlite_inserts = bulk.run_sqlite_inserts
    bulk.run_sqlite_inserts = sqlite_inserts  # type: ignore[assignment]
    fetch_pg = Tx.fetch_pg
    Tx.fetch_pg = fetched  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Tx.fetch_pg = fetch_pg  # type: ignore[method-assign]
        bulk.run_sqlite_inserts = run_sqlite_inserts  # type: ignore[assignment]
        event.remove(engine, "before_cursor_execute", statement)


@pytest.mark.parametrize("together", [True, False], ids=["together", "one-by-one"])
async def test_a_batch_of_send_steps(
    client: httpx.AsyncClient, services: Services, together: bool
) -> None:
    """Accepted together or one by one, each step ends the same way: mailed once, skipped
    (suppressed, unsubscribed) or failed, across two teams."""
    services.automation_steps.together = together
    ours, theirs = await make_tenant(services), await make_tenant(services)
    people = [{"email": f"p{n}@example.com", "first_name": f"P{n}"} for n in range(4)]
    people.append({"email": "gone@example.com", "unsubscribed": True})
    people.append({"email": "listed@example.com"})
    added = await client.post(
        "/suppressions", json={"email": "listed@example.com"}, headers=ours.headers()
    )
    assert added.status_code == 201, added.text
    mine = await start_runs(client, ours, people)
    other = await start_runs(client, theirs, [{"email": "p0@example.com", "first_name": "Q"}])
    batch = await claimed(services)
    assert len(batch) == len(people) + 1

    with email_inserts(services) as inserts:
        await services.automation_steps.run_steps(batch)
    assert len(inserts) == (1 if together else 5)  # 4 of ours + 1 of theirs, grouped or not

    runs = await runs_by_email(client, ours, mine)
    assert {r["status"] for r in runs.values()} == {"completed"}
    outputs = {address: r["steps"][1]["output"] for address, r in runs.items()}
    assert outputs["gone@example.com"] == {"email_id": None, "skipped": "unsubscribed"}
    assert outputs["listed@example.com"] == {"email_id": None, "skipped": "suppressed"}
    for n in range(4):
        email_id = outputs[f"p{n}@example.com"]["email_id"]
        got = await client.get(f"/emails/{email_id}", headers=ours.headers())
        assert got.json()["subject"] == f"Hi P{n}" and got.json()["to"] == [f"p{n}@example.com"]
    [their_run] = (await runs_by_email(client, theirs, other)).values()
    their_email = their_run["steps"][1]["output"]["email_id"]
    assert (await client.get(f"/emails/{their_email}", headers=theirs.headers())).json()[
        "subject"
    ] == "Hi Q"
    assert await emails_to(client, ours, "p0@example.com") == 1
    assert await emails_to(client, theirs, "p0@example.com") == 1
    assert await step_jobs(services) == []


async def test_a_step_whose_job_was_taken_is_not_kept_and_the_others_are(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    """One job of the batch claimed again by another worker meanwhile: the grouped accept is
    undone, every other step is executed on its own and mails once; the taken one mails
    nothing and stays where it was (its new holder executes it)."""
    people = [{"email": f"p{n}@example.com"} for n in range(3)]
    automation_id = await start_runs(client, tenant, people)
    batch = await claimed(services)
    taken = batch[1]
    async with services.db.transaction() as tx:
        await tx.conn.execute(
            update(jobs).where(jobs.c.id == taken.id).values(attempts=jobs.c.attempts + 1)
        )

    await services.automation_steps.run_steps(batch)

    runs = await runs_by_email(client, tenant, automation_id)
    for address, run in runs.items():
        if run["id"] == taken.ref:
            assert run["status"] == "running" and [s["key"] for s in run["steps"]] == ["start"]
            assert await emails_to(client, tenant, address) == 0
        else:
            assert run["status"] == "completed" and run["steps"][1]["output"]["email_id"]
            assert await emails_to(client, tenant, address) == 1
    assert await step_jobs(services) == [taken.ref]


async def count_statements(services: Services, batch: list[Job]) -> int:
    """The statements ``run_steps`` sends for the batch."""
    seen = [0]

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if not sql.startswith("PRAGMA"):  # SQLite's commit watch polls beside the batch
            seen[0] += 1

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", statement)
    try:
        await services.automation_steps.run_steps(batch)
    finally:
        event.remove(engine, "before_cursor_execute", statement)
    return seen[0]


async def test_a_batch_costs_the_same_statements_whatever_its_size(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    """Runs read, locked and written as grouped statements: a batch of 12 send steps sends
    as many statements as a batch of 4, and every run ends with its one email."""
    automation_id = await start_runs(
        client, tenant, [{"email": f"p{n}@example.com"} for n in range(17)]
    )
    batch = await claimed(services)
    await services.automation_steps.run_steps(batch[:1])  # the graph version read and kept
    small = await count_statements(services, batch[1:5])
    large = await count_statements(services, batch[5:])
    assert small == large
    runs = await runs_by_email(client, tenant, automation_id)
    assert len(runs) == 17 and {r["status"] for r in runs.values()} == {"completed"}
    for address in runs:
        assert await emails_to(client, tenant, address) == 1


DELAYED = {
    "name": "Later",
    "status": "enabled",
    "steps": [
        {"key": "start", "type": "trigger", "config": {"event": "contact.created"}},
        {"key": "pause", "type": "delay", "config": {"duration": "1h"}},
        GRAPH["steps"][1],
        {"key": "tag", "type": "contact_update", "config": {"properties": {"mailed": "yes"}}},
    ],
    "connections": [
        {"from": "start", "to": "pause"},
        {"from": "pause", "to": "mail"},
        {"from": "mail", "to": "tag"},
    ],
}


async def test_a_run_starts_in_its_delay_and_goes_on_in_one_job_when_it_ends(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    """The run's delay starts with the run (its step row written, its job due when the delay
    ends: nothing to claim before); once due, one claim runs the delay's end, the email and
    the step after it."""
    people = [{"email": f"p{n}@example.com", "first_name": f"P{n}"} for n in range(3)]
    automation_id = await start_runs(client, tenant, people, DELAYED)
    async with services.db.read() as tx:
        started = (await tx.conn.execute(select(func.min(automation_runs.c.created_at)))).scalar()
        due = (await tx.conn.execute(select(func.min(jobs.c.available_at)))).scalar()
        pauses = (
            await tx.conn.execute(
                select(automation_run_steps.c.status).where(automation_run_steps.c.key == "pause")
            )
        ).scalars()
        assert list(pauses) == ["running"] * 3
    assert due >= started + 3_600_000
    assert await claimed(services) == []

    hour_ago = now_ms() - 3_600_000  # as if the hour had passed
    async with services.db.transaction() as tx:
        await tx.conn.execute(update(automation_run_steps).values(started_at=hour_ago))
        await tx.conn.execute(update(jobs).values(available_at=now_ms()))
    batch = await claimed(services)
    assert len(batch) == 3
    await services.automation_steps.run_steps(batch)

    runs = await runs_by_email(client, tenant, automation_id)
    for address, run in runs.items():
        assert run["status"] == "completed"
        assert [(s["key"], s["status"]) for s in run["steps"]] == [
            ("start", "completed"), ("pause", "completed"), ("mail", "completed"),
            ("tag", "completed"),
        ]  # fmt: skip
        assert await emails_to(client, tenant, address) == 1
        contact = await client.get(f"/contacts/{address}", headers=tenant.headers())
        assert contact.json()["properties"] == {"mailed": "yes"}
    assert await step_jobs(services) == []


async def test_a_step_that_raises_holds_up_only_itself(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    """One run of the batch cannot execute (its graph version is gone): the batch is rolled
    back and each job runs on its own; the others mail once, the broken one stays queued."""
    people = [{"email": f"p{n}@example.com"} for n in range(3)]
    automation_id = await start_runs(client, tenant, people)
    batch = await claimed(services)
    broken = batch[1]
    async with services.db.transaction() as tx:
        await tx.conn.execute(
            update(automation_runs)
            .where(automation_runs.c.id == broken.ref)
            .values(version_id="01900000-0000-7000-8000-000000000000")
        )

    await services.automation_steps.run_steps(batch)

    runs = await runs_by_email(client, tenant, automation_id)
    for address, run in runs.items():
        mailed = 0 if run["id"] == broken.ref else 1
        assert run["status"] == ("running" if mailed == 0 else "completed")
        assert await emails_to(client, tenant, address) == mailed
    assert await step_jobs(services) == [broken.ref]
