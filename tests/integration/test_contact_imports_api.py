"""/contacts/imports: a CSV imported by its job, with counts, line errors, upsert and skip,
segments, bad uploads refused whole, team isolation, and a job interrupted between parts
that goes on without counting or announcing a line twice, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from posthaste.bootstrap import Services
from posthaste.core import contact_imports as core
from posthaste.core.ids import now_ms
from posthaste.services.contact_imports import ContactImportService
from posthaste.storage import contacts as contacts_repo
from posthaste.storage.tables import contact_import_parts, contact_imports, contacts, jobs
from tests.conftest import Tenant, make_tenant
from tests.helpers import events_of

CSV = (
    "email,first_name,last_name,unsubscribed,plan,seats:number\r\n"
    "ann@example.com,Ann,Lee,false,pro,3\r\n"
    "not-an-address,Bob,,,free,1\r\n"
    "\r\n"
    'cid@example.com,"Cid, Jr.",,yes,"multi\r\nline",2.5\r\n'
    "dee@example.com,,,maybe,free,1\r\n"
    "eve@example.com,Eve,,,,many\r\n"
    "fay@example.com,Fay\r\n"
)


async def post_csv(
    client: httpx.AsyncClient,
    tenant: Tenant,
    body: str | bytes,
    content_type: str = "text/csv",
    **params: str,
) -> httpx.Response:
    return await client.post(
        "/contacts/imports",
        content=body.encode() if isinstance(body, str) else body,
        params=params,
        headers={**tenant.headers(), "Content-Type": content_type},
    )


async def imported(
    client: httpx.AsyncClient, services: Services, tenant: Tenant, body: str, **params: str
) -> dict[str, Any]:
    """Post the CSV, run the jobs, and return the finished import."""
    started = await post_csv(client, tenant, body, **params)
    assert started.status_code == 202, started.text
    await services.make_worker().run_until_idle()
    got = await client.get(f"/contacts/imports/{started.json()['id']}", headers=tenant.headers())
    assert got.status_code == 200
    return dict(got.json())


async def count(services: Services, table: Any) -> int:
    async with services.db.read() as tx:
        return int((await tx.conn.execute(select(func.count()).select_from(table))).scalar_one())


async def test_good_lines_go_in_and_bad_lines_are_reported_with_their_line_numbers(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    started = await post_csv(client, tenant, CSV)
    assert started.status_code == 202
    body = started.json()
    assert body["object"] == "contact_import" and body["status"] == "queued"
    assert body["total"] == 6 and body["created"] == 0
    await services.make_worker().run_until_idle()
    done = (await client.get(f"/contacts/imports/{body['id']}", headers=tenant.headers())).json()
    assert done["status"] == "completed" and done["completed_at"] is not None
    counts = {"total": 6, "created": 2, "updated": 0, "skipped": 0, "failed": 4}
    assert {k: done[k] for k in counts} == counts and done["counts"] == counts
    lines = [(e["line"], e["message"]) for e in done["errors"]]
    assert [line for line, _ in lines] == [3, 7, 8, 9], lines
    assert "address" in lines[0][1] or "email" in lines[0][1]
    assert "unsubscribed" in lines[1][1]
    assert "'seats' is a number column" in lines[2][1]
    assert "2 fields" in lines[3][1]
    ann = (await client.get("/contacts/ann@example.com", headers=tenant.headers())).json()
    assert (ann["first_name"], ann["last_name"], ann["unsubscribed"]) == ("Ann", "Lee", False)
    assert ann["properties"] == {"plan": "pro", "seats": 3}
    cid = (await client.get("/contacts/cid@example.com", headers=tenant.headers())).json()
    assert cid["first_name"] == "Cid, Jr." and cid["unsubscribed"] is True
    assert cid["properties"] == {"plan": "multi\r\nline", "seats": 2.5}
    async with services.db.read() as tx:
        created = await events_of(tx, tenant.team.id, "contact.created")
    assert sorted(e["email"] for e in created) == ["ann@example.com", "cid@example.com"]
    assert await count(services, contact_import_parts) == 0  # the CSV is dropped once done


async def test_upsert_writes_given_values_and_skip_leaves_existing_contacts_alone(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    first = "email,first_name,plan\nann@example.com,Ann,free\nbob@example.com,Bob,free\n"
    assert (await imported(client, services, tenant, first))["created"] == 2
    again = "email,first_name,plan,city\nANN@example.com,,pro,Oslo\nbob@example.com,Bob,free,\n"
    upserted = await imported(client, services, tenant, again)
    assert (upserted["created"], upserted["updated"], upserted["skipped"]) == (0, 1, 1)
    ann = (await client.get("/contacts/ann@example.com", headers=tenant.headers())).json()
    assert ann["email"] == "ann@example.com"  # the stored address keeps its case
    assert ann["first_name"] == "Ann"  # an empty cell keeps the value
    assert ann["properties"] == {"plan": "pro", "city": "Oslo"}
    skip = "email,plan\nann@example.com,gold\ncid@example.com,gold\n"
    skipped = await imported(client, services, tenant, skip, on_conflict="skip")
    assert (skipped["created"], skipped["updated"], skipped["skipped"]) == (1, 0, 1)
    ann = (await client.get("/contacts/ann@example.com", headers=tenant.headers())).json()
    assert ann["properties"]["plan"] == "pro"
    async with services.db.read() as tx:
        updated = await events_of(tx, tenant.team.id, "contact.updated")
    assert [e["email"] for e in updated] == ["ann@example.com"]


async def test_a_part_whose_address_was_taken_meanwhile_is_redone_whole(
    client: httpx.AsyncClient,
    tenant: Tenant,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = await client.post(
        "/contacts", json={"email": "bob@example.com"}, headers=tenant.headers()
    )
    assert made.status_code == 201, made.text
    lookup = contacts_repo.contacts_by_keys
    calls = 0

    async def misses_bob_once(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return [] if calls == 1 else await lookup(*args)  # as if bob came in meanwhile

    monkeypatch.setattr(contacts_repo, "contacts_by_keys", misses_bob_once)
    csv = "email,plan\nann@example.com,pro\nbob@example.com,pro\n"
    done = await imported(client, services, tenant, csv)
    assert (done["status"], done["created"], done["updated"]) == ("completed", 1, 1)
    assert calls == 2
    assert await count(services, contacts) == 2
    async with services.db.read() as tx:
        created = await events_of(tx, tenant.team.id, "contact.created")
    assert sorted(e["email"] for e in created) == ["ann@example.com", "bob@example.com"]


async def test_an_address_repeated_in_the_file_is_one_contact(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    csv = "email,plan\nann@example.com,free\nANN@example.com,pro\nann@example.com,pro\n"
    done = await imported(client, services, tenant, csv)
    assert (done["created"], done["updated"], done["skipped"]) == (1, 1, 1)
    listed = (await client.get("/contacts", headers=tenant.headers())).json()["data"]
    assert [(c["email"], c["properties"]) for c in listed] == [("ann@example.com", {"plan": "pro"})]
    async with services.db.read() as tx:
        created = await events_of(tx, tenant.team.id, "contact.created")
    assert [e["properties"] for e in created] == [{"plan": "pro"}]


async def test_every_good_line_joins_the_segment_even_a_skipped_one(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    segment = (
        await client.post("/segments", json={"name": "Import"}, headers=tenant.headers())
    ).json()
    await client.post("/contacts", json={"email": "old@example.com"}, headers=tenant.headers())
    csv = "email\nold@example.com\nnew@example.com\nbad\n"
    done = await imported(
        client, services, tenant, csv, segment_id=segment["id"], on_conflict="skip"
    )
    assert done["segment_ids"] == [segment["id"]]
    members = await client.get(f"/segments/{segment['id']}/contacts", headers=tenant.headers())
    assert sorted(c["email"] for c in members.json()["data"]) == [
        "new@example.com",
        "old@example.com",
    ]


@pytest.mark.parametrize(
    ("body", "content_type", "params", "says"),
    [
        ("", "text/csv", {}, "empty"),
        ("\r\n\r\n", "text/csv", {}, "empty"),
        ("email,plan\n", "text/csv", {}, "no contact lines"),
        ("name,plan\nann@example.com,pro\n", "text/csv", {}, "'email'"),
        ("email,since:date\nann@example.com,2020\n", "text/csv", {}, "unknown column type"),
        ("email,plan,plan\na@example.com,a,b\n", "text/csv", {}, "twice"),
        ("email,bad key\na@example.com,a\n", "text/csv", {}, "Header column 2"),
        ('email,plan\na@example.com,"open\n', "text/csv", {}, "Line 2"),
        (b"email\nb\xe9@example.com\n", "text/csv", {}, "Line 2 is not UTF-8"),
        ("email\na@example.com\n", "application/json", {}, "text/csv"),
        ("email\na@example.com\n", "text/csv; charset=latin-1", {}, "UTF-8"),
        ("email\na@example.com\n", "text/csv", {"on_conflict": "merge"}, "on_conflict"),
        ("email\na@example.com\n", "text/csv", {"segment_id": "nope"}, "segment_id"),
        (
            "email\na@example.com\n",
            "text/csv",
            {"segment_id": "0190b4a0-0000-7000-8000-000000000000"},
            "not one of your segments",
        ),
    ],
)
async def test_a_bad_upload_is_refused_whole_and_stores_nothing(
    client: httpx.AsyncClient,
    tenant: Tenant,
    services: Services,
    body: str | bytes,
    content_type: str,
    params: dict[str, str],
    says: str,
) -> None:
    refused = await post_csv(client, tenant, body, content_type, **params)
    assert refused.status_code == 422, refused.text
    assert refused.json()["name"] == "validation_error"
    assert says in refused.json()["message"]
    for table in (contact_imports, contact_import_parts, jobs):
        assert await count(services, table) == 0


async def test_another_teams_import_is_not_found_and_lists_are_per_team(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    mine = await imported(client, services, tenant, "email\nann@example.com\n")
    other = await make_tenant(services)
    for ref in (mine["id"], "0190b4a0-0000-7000-8000-000000000000", "not-an-id"):
        got = await client.get(f"/contacts/imports/{ref}", headers=other.headers())
        assert got.status_code == 404 and got.json()["name"] == "not_found"
    assert (await client.get("/contacts/imports", headers=other.headers())).json()["data"] == []
    second = await imported(client, services, tenant, "email\nbob@example.com\n")
    listed = (await client.get("/contacts/imports", headers=tenant.headers())).json()
    assert [i["id"] for i in listed["data"]] == [second["id"], mine["id"]]
    paged = await client.get("/contacts/imports?limit=1", headers=tenant.headers())
    assert [i["id"] for i in paged.json()["data"]] == [second["id"]]
    assert paged.json()["has_more"] is True


async def test_a_job_stopped_mid_way_goes_on_without_counting_a_line_twice(
    client: httpx.AsyncClient,
    tenant: Tenant,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services.contact_imports.part_rows = 3
    rows = [f"user{n}@example.com,{n}" for n in range(10)]
    csv = "email,rank:number\n" + "\n".join([*rows[:4], "bad,1", *rows[4:]]) + "\n"
    started = (await post_csv(client, tenant, csv)).json()
    assert await count(services, contact_import_parts) == 4
    store_part = ContactImportService._store_part
    calls = 0

    async def dies_in_the_third_part(self: ContactImportService, *args: Any) -> Any:
        nonlocal calls
        calls += 1
        result = await store_part(self, *args)
        if calls == 3:
            raise RuntimeError("the worker dies before the third part commits")
        return result

    monkeypatch.setattr(ContactImportService, "_store_part", dies_in_the_third_part)
    await services.make_worker().run_until_idle()
    halfway = (
        await client.get(f"/contacts/imports/{started['id']}", headers=tenant.headers())
    ).json()
    assert halfway["status"] == "running"
    assert (halfway["created"], halfway["failed"]) == (5, 1)  # two parts: lines 2-7
    async with services.db.transaction() as tx:  # the dead worker's lease runs out
        await tx.conn.execute(update(jobs).values(available_at=now_ms()))
    await services.make_worker().run_until_idle()
    done = (await client.get(f"/contacts/imports/{started['id']}", headers=tenant.headers())).json()
    assert done["status"] == "completed"
    assert (done["total"], done["created"], done["failed"]) == (11, 10, 1)
    assert [e["line"] for e in done["errors"]] == [6]
    assert await count(services, contacts) == 10
    assert await count(services, jobs) == 0
    async with services.db.read() as tx:
        created = await events_of(tx, tenant.team.id, "contact.created")
    assert sorted(e["email"] for e in created) == sorted(r.split(",")[0] for r in rows)


async def test_an_import_whose_segment_is_deleted_meanwhile_stops_as_failed(
    client: httpx.AsyncClient,
    tenant: Tenant,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services.contact_imports.part_rows = 2
    segment = (
        await client.post("/segments", json={"name": "Gone"}, headers=tenant.headers())
    ).json()
    csv = "email\n" + "".join(f"u{n}@example.com\n" for n in range(5))
    started = (await post_csv(client, tenant, csv, segment_id=segment["id"])).json()
    next_part = ContactImportService._import_next_part
    calls = 0

    async def segment_deleted_after_the_first_part(self: ContactImportService, *args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            gone = await client.delete(f"/segments/{segment['id']}", headers=tenant.headers())
            assert gone.status_code == 200
        return await next_part(self, *args)

    monkeypatch.setattr(
        ContactImportService, "_import_next_part", segment_deleted_after_the_first_part
    )
    await services.make_worker().run_until_idle()
    done = (await client.get(f"/contacts/imports/{started['id']}", headers=tenant.headers())).json()
    assert done["status"] == "failed" and done["created"] == 2
    assert done["errors"] == [
        {"line": 4, "message": "A segment of the import was deleted meanwhile."}
    ]
    assert await count(services, contacts) == 2
    assert await count(services, jobs) == 0


async def test_an_import_whose_job_keeps_failing_is_failed_at_the_line_it_reached(
    client: httpx.AsyncClient,
    tenant: Tenant,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = (await post_csv(client, tenant, "email\nann@example.com\n")).json()
    async with services.db.transaction() as tx:
        await tx.conn.execute(update(jobs).values(attempts=core.MAX_ATTEMPTS))
    await services.make_worker().run_until_idle()
    done = (await client.get(f"/contacts/imports/{started['id']}", headers=tenant.headers())).json()
    assert done["status"] == "failed" and done["created"] == 0
    assert done["errors"][0]["line"] == 2 and "attempts" in done["errors"][0]["message"]
    assert await count(services, jobs) == 0
    assert await count(services, contact_import_parts) == 0


async def test_resends_form_upload_imports_the_file_part_with_its_options(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    segment = (
        await client.post("/segments", json={"name": "Form"}, headers=tenant.headers())
    ).json()
    await client.post(
        "/contacts", json={"email": "old@example.com", "first_name": "Old"},
        headers=tenant.headers(),
    )  # fmt: skip
    csv = b"email,first_name\r\nold@example.com,New\r\nnew@example.com,Nan\r\n"
    started = await client.post(
        "/contacts/imports",
        files={"file": ("import.csv", csv, "text/csv")},
        data={"on_conflict": "skip", "segments": f'[{{"id": "{segment["id"]}"}}]'},
        headers=tenant.headers(),
    )
    assert started.status_code == 202, started.text
    assert started.json()["on_conflict"] == "skip"
    assert started.json()["segment_ids"] == [segment["id"]]
    await services.make_worker().run_until_idle()
    done = (
        await client.get(f"/contacts/imports/{started.json()['id']}", headers=tenant.headers())
    ).json()
    assert done["counts"] == {"total": 2, "created": 1, "updated": 0, "skipped": 1, "failed": 0}
    old = (await client.get("/contacts/old@example.com", headers=tenant.headers())).json()
    assert old["first_name"] == "Old"
    members = await client.get(f"/segments/{segment['id']}/contacts", headers=tenant.headers())
    assert len(members.json()["data"]) == 2


@pytest.mark.parametrize(
    ("files", "data", "says"),
    [
        ({}, {"on_conflict": "skip"}, "no 'file' part"),
        ({"file": ("a.csv", b"email\na@example.com\n")}, {"column_map": "{}"}, "'column_map'"),
        ({"file": ("a.csv", b"email\na@example.com\n")}, {"segments": "[nope"}, "JSON"),
        ({"file": ("a.csv", b"name\nAnn\n")}, {}, "'email'"),
    ],
)
async def test_a_bad_form_upload_is_refused_and_stores_nothing(
    client: httpx.AsyncClient,
    tenant: Tenant,
    services: Services,
    files: dict[str, Any],
    data: dict[str, str],
    says: str,
) -> None:
    refused = await client.post(
        "/contacts/imports", files=files or {"other": ("x", b"1")}, data=data,
        headers=tenant.headers(),
    )  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert says in refused.json()["message"]
    assert await count(services, contact_imports) == 0
    broken = await post_csv(client, tenant, b"--b\r\nno end", "multipart/form-data; boundary=b")
    assert broken.status_code == 422 and "malformed" in broken.json()["message"]
