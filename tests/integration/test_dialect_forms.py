"""Each query with two forms runs its own dialect's: on PostgreSQL the statement that reaches the
server is the PostgreSQL form (one statement over arrays, on the driver connection where it
should be), on SQLite never. A form swapped in a repository (the SQLite form would still work on
PostgreSQL, only slower) fails here; the PostgreSQL forms fail on SQLite by themselves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.util import await_only

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Event
from posthaste.core.webhooks import DeliveryStatus, WebhookAttempt
from posthaste.storage import bulk, suppressions, webhook_queue
from posthaste.storage import events as events_repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.tables import jobs
from tests.conftest import Tenant
from tests.helpers import email_body
from tests.integration.rows import job_row

Operation = Callable[[Database, str], Awaitable[Any]]


def _record_statements(db: Database) -> list[str]:
    """Every statement sent from now on: through SQLAlchemy, and straight on the driver
    connections under it (asyncpg's query logger; sqlite3's trace callback, for what runs on
    the connection's thread through ``Tx.run_sqlite``)."""
    seen: list[str] = []

    def sent(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    def checkout(dbapi_conn: Any, *_: Any) -> None:
        driver = dbapi_conn.driver_connection
        if hasattr(driver, "add_query_logger"):
            driver.add_query_logger(lambda query: seen.append(query.query))
        else:
            await_only(driver.set_trace_callback(seen.append))

    event.listen(db.engine.sync_engine, "before_cursor_execute", sent)
    event.listen(db.engine.sync_engine.pool, "checkout", checkout)
    return seen


async def _listed_in_autocommit(db: Database, team: str) -> None:
    async with db.autocommit() as tx:
        await suppressions.find_listed(tx, team, ["a@example.com", "b@example.com"])


async def _listed_in_transaction(db: Database, team: str) -> None:
    async with db.transaction() as tx:
        await suppressions.find_listed(tx, team, ["a@example.com"])


async def _events_with_their_rows(db: Database, team: str) -> None:
    async with db.autocommit() as tx:
        also = [(jobs, [job_row(team)])]
        await events_repo.insert_events(
            tx, [Event(new_id(), team, "email.sent", None, 1, {})], also
        )


async def _rows_inserted(db: Database, team: str) -> str:
    row = job_row(team)
    async with db.transaction() as tx:
        await bulk.insert_rows(tx, jobs, [row])
    return str(row["ref"])


async def _two_rows_inserted(db: Database, team: str) -> None:
    async with db.transaction() as tx:
        await bulk.insert_rows(tx, jobs, [job_row(team), job_row(team)])


async def _rows_updated(db: Database, team: str) -> None:
    ref = await _rows_inserted(db, team)
    async with db.transaction() as tx:
        await bulk.update_rows(tx, jobs, ["ref"], [{"ref": ref, "attempts": 3}])


async def _rows_deleted(db: Database, team: str) -> None:
    ref = await _rows_inserted(db, team)
    async with db.transaction() as tx:
        await bulk.delete_rows(tx, jobs, [{"ref": ref}])


async def _deliveries_claimed(db: Database, team: str) -> None:
    await webhook_queue.claim_due(db, now_ms(), 60_000, {}, 8, 10)


async def _outcomes_recorded(db: Database, team: str) -> None:
    claimed = webhook_queue.Claimed(new_id(), new_id(), team, 0, 1, None)
    attempt = WebhookAttempt(
        new_id(), claimed.webhook_id, claimed.event_id, 1, 500, False, None, 1, None
    )
    outcome = webhook_queue.Outcome(claimed, attempt, DeliveryStatus.PENDING, now_ms() + 1000)
    await webhook_queue.record_outcomes(db, [outcome])


async def _stream_read(db: Database, team: str) -> None:
    async with db.read() as tx:
        start, _ = await events_repo.tail_position(tx, team)
        await events_repo.events_after(tx, team, start, None, 10)


async def _position_read(db: Database, team: str) -> None:
    async with db.read() as tx:
        await events_repo.position_of(tx, team, new_id())


# What only the PostgreSQL form of each sends.
OPERATIONS: dict[str, tuple[Operation, str]] = {
    "suppression check, autocommit": (_listed_in_autocommit, suppressions._LISTED_PG),
    "suppression check, transaction": (_listed_in_transaction, suppressions._LISTED_PG),
    "events with their rows and fan-out": (_events_with_their_rows, "), fanned AS ("),
    "bulk insert": (_two_rows_inserted, "SELECT * FROM unnest($1::"),
    "bulk insert, one row": (_rows_inserted, "SELECT * FROM (VALUES ($1::"),
    "bulk update": (_rows_updated, "UPDATE jobs SET attempts = v.attempts FROM unnest($1::"),
    "bulk delete": (_rows_deleted, "DELETE FROM jobs USING unnest($1::"),
    "webhook claim": (_deliveries_claimed, webhook_queue._CLAIM_PG),
    "webhook outcomes": (_outcomes_recorded, webhook_queue._RECORD_PG),
    "event stream": (_stream_read, "pg_snapshot_xmin(pg_current_snapshot())"),
    "event position": (_position_read, "SELECT events.txid, events.id"),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_each_query_runs_its_dialects_form(
    services: Services, tenant: Tenant, backend: str, operation: str
) -> None:
    run, postgres_only = OPERATIONS[operation]
    seen = _record_statements(services.db)
    await run(services.db, tenant.team.id)
    await asyncio.sleep(0)  # asyncpg hands logged queries to its loggers on the next turn
    sent_postgres_form = any(postgres_only in statement for statement in seen)
    assert seen and sent_postgres_form == (backend == "postgres"), seen


async def test_autocommit_units_hold_the_driver_connection_only_on_postgresql(
    services: Services, backend: str
) -> None:
    async with services.db.autocommit() as tx:
        kept: Tx = tx
    assert (kept.driver is not None) == (backend == "postgres")


async def test_postgresql_plans_each_statement_for_its_values(
    services: Services, backend: str
) -> None:
    """A statement asyncpg prepared while a table was small must not keep a generic plan made
    then (a sequential scan) once the table has grown: PostgreSQL sessions plan every run."""
    if backend != "postgres":
        pytest.skip("a PostgreSQL session setting; SQLite plans every statement anyway")
    async with services.db.transaction() as tx:
        mode = (await tx.conn.exec_driver_sql("SHOW plan_cache_mode")).scalar_one()
    assert mode == "force_custom_plan"


PREPARED = "SELECT statement, generic_plans FROM pg_prepared_statements"


@pytest.mark.parametrize("backend", ["postgres"])  # PostgreSQL's plan cache
async def test_the_storing_statement_alone_runs_on_generic_plans(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    """The autocommit unit's second connection stores the lone sends' groups on a generic plan
    (made once, kept: the statement inserts whatever the values), while its lookups
    (suppressions, unsubscribes, domains...) keep being planned for their values."""
    for n in range(8):  # one at a time: each its own group, the statement run eight times
        sent = await client.post(
            "/emails", json=email_body(subject=f"n{n}"), headers=tenant.headers()
        )
        assert sent.status_code == 200, sent.text
    async with services.db.autocommit() as tx:
        kept: Tx = tx
    assert kept.driver is not None and kept.generic is not None
    stored = await kept.generic.fetch(PREPARED)
    assert any("INSERT INTO events" in s and generic > 0 for s, generic in stored), stored
    # (A statement without parameters has one plan: only those with some can be custom.)
    looked_up = [(s, generic) for s, generic in await kept.driver.fetch(PREPARED) if "$1" in s]
    assert looked_up and all(generic == 0 for _, generic in looked_up), looked_up
    assert await kept.generic.fetchval("SHOW plan_cache_mode") == "auto"
    assert await kept.driver.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
