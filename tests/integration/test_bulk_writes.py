"""``storage.bulk``: many rows in one statement, stored exactly as ``executemany`` stores them,
inside the caller's transaction, on SQLite and PostgreSQL (there with the rows as arrays and as
JSON text)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Text, cast, select

from posthaste.bootstrap import Services
from posthaste.core.ids import new_id
from posthaste.storage import bulk
from posthaste.storage.tables import api_keys, events, jobs, teams
from tests.conftest import Tenant
from tests.integration.rows import api_key_row, job_row


@pytest.fixture(params=["arrays", "json"], autouse=True)
def rows_as(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every write both ways PostgreSQL may get its rows: an array per column, or JSON text."""
    monkeypatch.setattr(bulk, "JSON_FROM_ROWS", 1 if request.param == "json" else 10**9)
    return str(request.param)


def _event(team_id: str, data: Any, email_id: str | None = None) -> dict[str, Any]:
    return {
        "id": new_id(),
        "team_id": team_id,
        "type": "email.sent",
        "email_id": email_id,
        "created_at": 1,
        "data": data,
    }


async def _events(services: Services) -> dict[str, tuple[Any, ...]]:
    async with services.db.read() as tx:
        query = select(events.c.id, events.c.email_id, events.c.data, events.c.type)
        return {row.id: tuple(row) for row in await tx.conn.execute(query)}


async def _stored(services: Services, *rows: dict[str, Any]) -> list[int]:
    """Insert job rows; their ids, in order."""
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, jobs, rows)
    ids = {ref: row[0] for ref, row in (await _jobs(services)).items()}
    return [ids[row["ref"]] for row in rows]


async def _jobs(services: Services) -> dict[str, tuple[Any, ...]]:
    """{ref: (id, attempts, available_at, locked_by)}"""
    async with services.db.read() as tx:
        query = select(
            jobs.c.ref, jobs.c.id, jobs.c.attempts, jobs.c.available_at, jobs.c.locked_by
        )
        return {row.ref: tuple(row)[1:] for row in await tx.conn.execute(query)}


@pytest.mark.parametrize("alone", [False, True], ids=["together", "each-alone"])
async def test_inserted_rows_read_back_as_executemany_stores_them(
    services: Services, tenant: Tenant, alone: bool
) -> None:
    """Together (``unnest``) or each in a write of its own (one row: ``VALUES``)."""
    team = tenant.team.id
    data = [
        {"a": [1, "é", None]},
        {},
        {"nested": {"x": 1.5, "ok": True}},
        ["list"],
        None,  # JSON's null, not SQL's NULL, as the column's bind processing stores it
        'a "quoted" \\ back\nslash, 🙂 and \u2028',
    ]
    ours = [_event(team, d, email_id=None if i % 2 else new_id()) for i, d in enumerate(data)]
    theirs = [_event(team, d, email_id=None if i % 2 else new_id()) for i, d in enumerate(data)]
    async with services.db.transaction() as tx:
        for write in [[row] for row in ours] if alone else [ours]:
            await bulk.insert_rows(tx, events, write)
        await tx.conn.execute(events.insert(), theirs)
    stored = await _events(services)
    texts = await _data_texts(services)
    for mine, reference in zip(ours, theirs, strict=True):
        assert stored[mine["id"]][1:] == (mine["email_id"], mine["data"], "email.sent")
        assert stored[reference["id"]][2] == stored[mine["id"]][2]
        assert texts[mine["id"]] == texts[reference["id"]] is not None  # the very same text


async def _data_texts(services: Services) -> dict[str, str | None]:
    async with services.db.read() as tx:
        query = select(events.c.id, cast(events.c.data, Text))
        return {row[0]: row[1] for row in await tx.conn.execute(query)}


async def test_rows_of_different_columns_are_written_each_with_their_own(
    services: Services, tenant: Tenant
) -> None:
    with_email = _event(tenant.team.id, {"n": 1}, email_id=new_id())
    without = {k: v for k, v in _event(tenant.team.id, {"n": 2}).items() if k != "email_id"}
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, events, [with_email, without])
    stored = await _events(services)
    assert stored[with_email["id"]][1] == with_email["email_id"]
    assert stored[without["id"]][1:3] == (None, {"n": 2})


async def test_writes_belong_to_the_callers_transaction(services: Services, tenant: Tenant) -> None:
    """The first statement of a transaction may be a bulk one: it must not commit by itself."""
    row = _event(tenant.team.id, {})

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with services.db.transaction() as tx:
            await bulk.insert_rows(tx, events, [row])
            raise Abort
    assert row["id"] not in await _events(services)


async def test_updates_match_on_every_key_and_the_last_row_of_a_key_wins(
    services: Services, tenant: Tenant
) -> None:
    first, second, untouched = (job_row(tenant.team.id, attempts=n) for n in (1, 2, 3))
    one, two, _ = await _stored(services, first, second, untouched)
    changes = [
        {"id": one, "attempts": 1, "available_at": 10, "locked_by": "w"},
        {"id": one, "attempts": 1, "available_at": 20, "locked_by": None},
        {"id": two, "attempts": 99, "available_at": 30, "locked_by": None},  # fenced
    ]
    async with services.db.transaction() as tx:
        await bulk.update_rows(tx, jobs, ["id", "attempts"], changes)
    stored = await _jobs(services)
    assert stored[first["ref"]][1:] == (1, 20, None)
    assert stored[second["ref"]][1:] == (2, 5, None)
    assert stored[untouched["ref"]][1:] == (3, 5, None)


async def test_deletes_take_only_rows_matching_every_column(
    services: Services, tenant: Tenant
) -> None:
    gone, fenced, kept = (job_row(tenant.team.id, attempts=n) for n in (1, 2, 3))
    gone_id, fenced_id, _ = await _stored(services, gone, fenced, kept)
    async with services.db.transaction() as tx:
        await bulk.delete_rows(
            tx, jobs, [{"id": gone_id, "attempts": 1}, {"id": fenced_id, "attempts": 7}]
        )
    assert set(await _jobs(services)) == {fenced["ref"], kept["ref"]}


async def test_nothing_to_write_is_no_statement(services: Services) -> None:
    async with services.db.transaction() as tx:
        await bulk.insert_rows(tx, events, [])
        await bulk.update_rows(tx, jobs, ["id"], [])
        await bulk.delete_rows(tx, jobs, [])


@pytest.mark.parametrize("backend", ["postgres"])  # SQLite does not enforce VARCHAR lengths
async def test_a_value_the_column_refuses_fails_the_whole_write(
    services: Services, tenant: Tenant
) -> None:
    good = _event(tenant.team.id, {})
    bad = {**_event(tenant.team.id, {}), "type": "x" * 500}  # String(40): PostgreSQL refuses
    with pytest.raises(Exception, match="too long"):
        async with services.db.transaction() as tx:
            await bulk.insert_rows(tx, events, [good, bad])
    assert good["id"] not in await _events(services)
    with pytest.raises(Exception, match="too long"):  # one row alone: ``VALUES``
        async with services.db.transaction() as tx:
            await bulk.insert_rows(tx, events, [bad])


def _team() -> dict[str, Any]:
    return {"id": new_id(), "name": new_id(), "rate_limit": 0, "daily_quota": 0, "created_at": 1}


async def _teams_and_keys(services: Services) -> tuple[set[str], set[str]]:
    async with services.db.read() as tx:
        team_ids = set((await tx.conn.execute(select(teams.c.id))).scalars())
        key_ids = set((await tx.conn.execute(select(api_keys.c.id))).scalars())
    return team_ids, key_ids


async def test_several_tables_in_one_write_parents_and_children_together(
    services: Services,
) -> None:
    team = _team()
    keys = [api_key_row(team["id"]), api_key_row(team["id"])]
    async with services.db.transaction() as tx:
        await bulk.insert_tables(tx, [(teams, [team]), (api_keys, keys), (events, [])])
    team_ids, key_ids = await _teams_and_keys(services)
    assert team["id"] in team_ids
    assert {k["id"] for k in keys} <= key_ids


async def test_a_broken_reference_in_a_several_table_write_stores_none_of_it(
    services: Services,
) -> None:
    team = _team()
    orphan = api_key_row(new_id())  # no such team
    with pytest.raises(Exception, match=r"(?i)foreign key"):
        async with services.db.transaction() as tx:
            await bulk.insert_tables(tx, [(teams, [team]), (api_keys, [orphan])])
    team_ids, key_ids = await _teams_and_keys(services)
    assert team["id"] not in team_ids
    assert orphan["id"] not in key_ids
