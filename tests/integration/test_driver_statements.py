"""Statements a repository sends on the asyncpg connection itself inside a transaction
(``Tx.fetch_pg``, ``Tx.rows``): they belong to the unit's transaction (committed with it,
rolled back with it), and fail as SQLAlchemy's statements fail; ``Tx.rows`` reads a kept Core
statement by position on either backend."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import bindparam, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from posthaste.bootstrap import Services
from posthaste.storage import bulk
from posthaste.storage.tables import jobs


def job_row(ref: str, attempts: int = 0) -> dict[str, Any]:
    return {
        "kind": "test",
        "ref": ref,
        "team_id": None,
        "available_at": 5,
        "attempts": attempts,
        "holds": 0,
        "created_at": 1,
    }


class Boom(Exception):
    pass


_BY_REF = select(jobs.c.ref, jobs.c.attempts).where(jobs.c.ref == bindparam("ref"))


async def _refs(services: Services) -> set[str]:
    async with services.db.read() as tx:
        return set((await tx.conn.execute(select(jobs.c.ref))).scalars())


async def test_rows_reads_a_kept_statement_by_position(services: Services) -> None:
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, jobs, [job_row("a", attempts=3), job_row("b")])
    async with services.db.transaction() as tx:
        rows = await tx.rows(_BY_REF, {"ref": "a"})
        again = await tx.rows(_BY_REF, {"ref": "b"})  # the same statement, kept
        none = await tx.rows(_BY_REF, {"ref": "nothing"})
    assert [tuple(row) for row in rows] == [("a", 3)]
    assert [tuple(row) for row in again] == [("b", 0)]
    assert none == []


async def test_a_bulk_write_is_rolled_back_with_its_transaction(services: Services) -> None:
    with pytest.raises(Boom):
        async with services.db.transaction() as tx:
            await bulk.insert_rows(tx, jobs, [job_row("first")])  # the unit's first statement
            await bulk.insert_rows(tx, jobs, [job_row("second")])
            raise Boom
    assert await _refs(services) == set()
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, jobs, [job_row("kept")])
    assert await _refs(services) == {"kept"}


async def test_a_read_first_then_a_write_share_the_transaction(services: Services) -> None:
    """A unit whose first statement is a read on the driver: the write after it is in the
    same transaction, so a failure after both leaves nothing."""
    with pytest.raises(Boom):
        async with services.db.transaction() as tx:
            await tx.rows(_BY_REF, {"ref": "x"})
            await bulk.insert_rows(tx, jobs, [job_row("x")])
            raise Boom
    assert await _refs(services) == set()


async def test_errors_are_sqlalchemys(services: Services, backend: str) -> None:
    if backend != "postgres":
        pytest.skip("SQLite's statements go through SQLAlchemy as before")
    async with services.db.transaction() as tx:
        [(job_id,)] = await tx.fetch_pg(
            "INSERT INTO jobs (kind, ref, available_at, attempts, holds, created_at)"
            " VALUES ('k', 'r', 0, 0, 0, 0) RETURNING id"
        )
    with pytest.raises(IntegrityError):
        async with services.db.transaction() as tx:
            await tx.fetch_pg(
                "INSERT INTO jobs (id, kind, ref, available_at, attempts, holds, created_at)"
                " VALUES ($1, 'k', 'r2', 0, 0, 0, 0)",
                job_id,
            )
    with pytest.raises(DBAPIError):
        async with services.db.transaction() as tx:
            await tx.fetch_pg("SELECT no_such_column FROM jobs")
    # The connections went back to the pool usable: the next unit works.
    assert await _refs(services) == {"r"}


async def test_a_read_unit_on_the_driver_leaves_no_transaction_open(
    services: Services, backend: str
) -> None:
    """A read unit whose only statements went to the driver: its transaction ends when the
    connection goes back to the pool (no connection is left idle in a transaction)."""
    if backend != "postgres":
        pytest.skip("PostgreSQL's transactions only")
    for _ in range(3):
        async with services.db.read() as tx:
            await tx.rows(_BY_REF, {"ref": "x"})
    async with services.db.read() as tx:
        [(open_ones,)] = await tx.fetch_pg(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
        )
    assert open_ones == 0
