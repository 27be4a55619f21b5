"""Blobs of a MiB or more go to PostgreSQL in pieces, and those in parts of a MiB or more are
written into SQLite where they are (``storage.blobs``): the stored bytes are the ones given
(parts joined, pieces in order), a failure leaves neither the row nor a large object, no large
object outlives its transaction, and a small blob costs no statement more."""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from posthaste.storage import bulk
from posthaste.storage import emails as emails_repo
from posthaste.storage.blobs import PIECE_BYTES, BlobRow, store_blobs_with
from posthaste.storage.database import Tx
from posthaste.storage.tables import blobs
from tests.conftest import Tenant

UNITS = ["transaction", "autocommit"]


class Refused(Exception):
    pass


def _unit(services: Services, name: str) -> Any:
    return services.db.transaction() if name == "transaction" else services.db.autocommit()


def _row(team_id: str, data: bytes | tuple[bytes, ...]) -> BlobRow:
    return {"id": new_id(), "team_id": team_id, "data": data, "created_at": 1}


def _inserting(tx: Tx, seen: list[list[BlobRow]], fail: bool = False) -> Any:
    async def statement(rows: list[BlobRow]) -> None:
        seen.append(rows)
        await bulk.insert_rows(tx, blobs, rows)
        if fail:
            raise Refused

    return statement


async def large_objects(services: Services, backend: str) -> int:
    """PostgreSQL's large objects in the database (none should outlive a transaction)."""
    if backend != "postgres":
        return 0
    async with services.db.read() as tx:
        query = text("SELECT count(*) FROM pg_largeobject_metadata")
        return int((await tx.conn.execute(query)).scalar_one())


async def _blob_count(services: Services) -> int:
    async with services.db.read() as tx:
        return int((await tx.conn.execute(select(func.count()).select_from(blobs))).scalar_one())


@pytest.mark.parametrize("unit", UNITS)
async def test_large_blobs_and_parts_are_stored_byte_for_byte(
    services: Services, tenant: Tenant, backend: str, unit: str
) -> None:
    whole = os.urandom(PIECE_BYTES * 2 + 17)
    parts = (b"Message-ID: <x@acme.test>\r\n", os.urandom(PIECE_BYTES - 3), os.urandom(PIECE_BYTES))
    small = (b"Date: now\r\n", b"body")
    rows = [_row(tenant.team.id, d) for d in (whole, parts, small, b"tiny", (whole[:PIECE_BYTES],))]
    seen: list[list[BlobRow]] = []
    async with _unit(services, unit) as tx:
        await store_blobs_with(tx, rows, _inserting(tx, seen))
    async with services.db.read() as tx:
        stored = await emails_repo.read_blobs(tx, [row["id"] for row in rows])
    expected = [whole, b"".join(parts), b"".join(small), b"tiny", whole[:PIECE_BYTES]]
    assert [stored[row["id"]] for row in rows] == expected
    [given] = seen
    assert all(isinstance(row["data"], bytes) for row in given)  # parts joined for the statement
    # The large ones went apart: every one on PostgreSQL, those in parts on SQLite.
    assert len(given) == (2 if backend == "postgres" else 3)
    assert await large_objects(services, backend) == 0


@pytest.mark.parametrize("unit", UNITS)
async def test_a_failed_statement_leaves_no_piece_behind(
    services: Services, tenant: Tenant, backend: str, unit: str
) -> None:
    large = os.urandom(3 * PIECE_BYTES)
    rows = [_row(tenant.team.id, large), _row(tenant.team.id, b"small")]
    rows.append(_row(tenant.team.id, (b"Date: now\r\n", large)))
    with pytest.raises(Refused):
        async with _unit(services, unit) as tx:
            await store_blobs_with(tx, rows, _inserting(tx, [], fail=True))
    assert await _blob_count(services) == 0
    assert await large_objects(services, backend) == 0


async def test_small_blobs_cost_no_statement_more(
    services: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Normal mail stays one statement: nothing is sent before the caller's own."""
    sent: list[str] = []
    fetch_pg = Tx.fetch_pg

    async def counted(self: Tx, sql: str, *params: Any, generic: bool = False) -> list[Any]:
        sent.append(sql)
        return await fetch_pg(self, sql, *params, generic=generic)

    monkeypatch.setattr(Tx, "fetch_pg", counted)
    rows = [_row(tenant.team.id, os.urandom(PIECE_BYTES - 1)), _row(tenant.team.id, (b"a", b"b"))]
    async with services.db.autocommit() as tx:
        await store_blobs_with(tx, rows, _inserting(tx, []))
    assert not [sql for sql in sent if "lo_" in sql]
    assert await _blob_count(services) == 2


async def test_a_large_email_and_its_submission_leave_no_large_object(
    services: Services, client: httpx.AsyncClient, tenant: Tenant, backend: str
) -> None:
    """Through the API: stored, read back whole, purged later with its row (a bytea)."""
    attachment = os.urandom(2 * PIECE_BYTES + 5)
    body = {
        "from": "a@acme.test",
        "to": "delivered@simulator.test",
        "subject": "Large",
        "text": "see the attachment",
        "attachments": [{"filename": "big.bin", "content": base64.b64encode(attachment).decode()}],
    }
    answer = await client.post("/emails", json=body, headers=tenant.headers())
    assert answer.status_code == 200, answer.text
    email_id = answer.json()["id"]
    listed = await client.get(f"/emails/{email_id}/attachments", headers=tenant.headers())
    [info] = listed.json()["data"]
    one = await client.get(f"/emails/{email_id}/attachments/{info['id']}", headers=tenant.headers())
    assert one.content == attachment
    assert await large_objects(services, backend) == 0
