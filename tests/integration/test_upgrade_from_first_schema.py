"""An upgrade never loses a row: a database made by the first migration (0001), with data in it,
migrated revision by revision up to head, keeps every row and serves it through the API.

The data is what today's code writes (a team with its keys and streams, a domain, a template, a
webhook with its deliveries and attempts, emails with recipients, tags, an attachment, events and
delivery attempts, a suppression, a contact, queued jobs): made through the API in a scratch
database, then written into the old one a table at a time, each as soon as a revision has
created it and with the columns that revision has (what a release of that time stored; a column
added later takes its migration's default). Every migration then runs over those rows.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, Table, func, inspect, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.storage.dialects import dialect_for
from posthaste.storage.migrate import alembic_config
from posthaste.storage.tables import metadata
from tests.apps import make_app
from tests.conftest import PG_ADMIN_DSN, Tenant, _pg_admin, make_tenant
from tests.helpers import email_body
from tests.openapi_check import checked_client

Rows = dict[str, list[dict[str, Any]]]
# Assigned by the database (a sequence on PostgreSQL): written without, compared without.
GENERATED = {"jobs": {"id"}}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, webhook_allow_private=True)


@pytest.fixture
async def old_url(settings: Settings, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database of the backend, for the test to migrate step by step."""
    if not settings.database_url.startswith("postgresql"):
        yield f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
        return
    name = f"posthaste_upg_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    await _pg_admin(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def revisions(url: str) -> list[str]:
    """Every revision, first to head."""
    script = ScriptDirectory.from_config(alembic_config(url, dialect_for(url)))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


async def migrate(engine: AsyncEngine, url: str, revision: str) -> None:
    def upgrade(conn: Connection) -> None:
        config = alembic_config(url, dialect_for(url))
        config.attributes["connection"] = conn
        command.upgrade(config, revision)

    async with engine.begin() as conn:
        await conn.run_sync(upgrade)


async def schema(engine: AsyncEngine, wanted: set[str]) -> list[Table]:
    """Those of ``wanted`` the database has now, as it has them (reflected: only the columns
    it has), parents before the tables whose foreign keys name them."""

    def reflect(conn: Connection) -> list[Table]:
        present = wanted & set(inspect(conn).get_table_names())
        if not present:
            return []
        found = MetaData()
        found.reflect(conn, only=sorted(present))
        return [table for table in found.sorted_tables if table.name in present]

    async with engine.connect() as conn:
        return await conn.run_sync(reflect)


async def make_data(services: Services) -> tuple[Tenant, dict[str, str]]:
    """Rows of every kind a user makes, through the API of today's code."""
    tenant = await make_tenant(services, "acme")
    ids: dict[str, str] = {}
    headers = tenant.headers("test")
    async with checked_client(make_app(services)) as client:

        async def post(path: str, body: Any, status: int = 201) -> dict[str, Any]:
            answer = await client.post(path, json=body, headers=headers)
            assert answer.status_code == status, (path, answer.text)
            created: dict[str, Any] = answer.json()
            return created

        ids["domain"] = (await post("/domains", {"name": "acme.test"}))["id"]
        ids["template"] = (
            await post("/templates", {"name": "welcome", "html": "<p>Hi {{{NAME}}}</p>"})
        )["id"]
        hook = {"endpoint": "http://127.0.0.1:9/hook", "events": ["email.sent"]}
        ids["webhook"] = (await post("/webhooks", hook))["id"]
        attachment = {"filename": "a.txt", "content": base64.b64encode(b"attached").decode()}
        sent = email_body(tags=[{"name": "kind", "value": "welcome"}], attachments=[attachment])
        ids["sent"] = (await post("/emails", sent, 200))["id"]
        await services.make_worker().run_until_idle()  # delivered: events, attempts, webhooks
        ids["queued"] = (await post("/emails", email_body(subject="Later"), 200))["id"]
        await post("/suppressions", {"email": "gone@example.com"})
        ids["contact"] = (await post("/contacts", {"email": "ann@example.com"}))["id"]
    return tenant, ids


async def dump(engine: AsyncEngine) -> Rows:
    """Every row of every table, as today's tables read them."""
    rows: Rows = {}
    async with engine.connect() as conn:
        for table in metadata.sorted_tables:
            found = [dict(row._mapping) for row in await conn.execute(select(table))]
            if found:
                rows[table.name] = found
    return rows


def _columns(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    skip = GENERATED.get(table.name, set())
    names = [column.name for column in table.c]
    return {name: row[name] for name in names if name in row and name not in skip}


async def replay(engine: AsyncEngine, url: str, rows: Rows) -> dict[str, set[str]]:
    """Migrate ``engine``'s empty database revision by revision from the first, writing each
    table's rows once a revision has made the table (unless a migration filled it already);
    the columns each table was written with."""
    written: dict[str, set[str]] = {}
    for revision in revisions(url):
        await migrate(engine, url, revision)
        tables = await schema(engine, set(rows) - set(written))
        async with engine.begin() as conn:
            for old in tables:
                name = old.name
                written[name] = set(_columns(old, rows[name][0]))
                if (await conn.execute(select(func.count()).select_from(old))).scalar():
                    continue  # a migration filled it from the rows before (email_subjects)
                await conn.execute(old.insert(), [_columns(old, row) for row in rows[name]])
    return written


def _key(row: dict[str, Any], columns: set[str]) -> str:
    return repr(sorted((name, repr(row[name])) for name in columns))


async def test_a_database_of_the_first_schema_upgrades_to_head_losing_nothing(
    services: Services, old_url: str
) -> None:
    tenant, ids = await make_data(services)
    rows = await dump(services.db.engine)
    # Representative: the first schema's tables and later ones, each with rows.
    for name in ("teams", "api_keys", "streams", "emails", "email_recipients", "email_tags"):
        assert name in rows, name
    for name in ("events", "blobs", "attachments", "suppressions", "jobs", "domains"):
        assert name in rows, name
    for name in ("templates", "webhooks", "webhook_deliveries", "delivery_attempts", "contacts"):
        assert name in rows, name

    engine = create_async_engine(old_url)
    try:
        written = await replay(engine, old_url, rows)
        assert set(written) == set(rows)
        assert written["emails"] < set(rows["emails"][0])  # emails gained columns since 0001
        upgraded = await dump(engine)
    finally:
        await engine.dispose()

    assert {name: len(found) for name, found in upgraded.items()} == {
        name: len(found) for name, found in rows.items()
    }
    for name, columns in written.items():
        before = sorted(_key(row, columns) for row in rows[name])
        after = sorted(_key(row, columns) for row in upgraded[name])
        assert after == before, name

    await _served_at_head(services.settings, old_url, tenant, ids)


async def _served_at_head(
    settings: Settings, async_url: str, tenant: Tenant, ids: dict[str, str]
) -> None:
    """The upgraded database through today's services: read, then written to."""
    plain = async_url.replace("+aiosqlite", "").replace("+asyncpg", "")
    upgraded = build_services(dataclasses.replace(settings, database_url=plain))
    try:
        async with checked_client(make_app(upgraded)) as client:
            headers = tenant.headers("test")

            async def get(path: str) -> Any:
                answer = await client.get(path, headers=headers)
                assert answer.status_code == 200, (path, answer.text)
                return answer.json()

            listed = await get("/emails")
            assert {e["id"] for e in listed["data"]} == {ids["sent"], ids["queued"]}
            sent = await get(f"/emails/{ids['sent']}")
            assert sent["last_event"] == "email.delivered" and sent["subject"] == "Hello"
            assert sent["tags"] == {"kind": "welcome"}
            [attachment] = (await get(f"/emails/{ids['sent']}/attachments"))["data"]
            assert attachment["filename"] == "a.txt"
            types = [e["type"] for e in (await get(f"/emails/{ids['sent']}/events"))["data"]]
            assert types == ["email.queued", "email.sending", "email.sent", "email.delivered"]
            assert len((await get(f"/emails/{ids['sent']}/attempts"))["data"]) == 1
            assert (await get(f"/domains/{ids['domain']}"))["name"] == "acme.test"
            assert (await get(f"/templates/{ids['template']}"))["name"] == "welcome"
            assert (await get(f"/webhooks/{ids['webhook']}"))["endpoint"].endswith("/hook")
            [suppressed] = (await get("/suppressions"))["data"]
            assert suppressed["email"] == "gone@example.com"
            assert (await get(f"/contacts/{ids['contact']}"))["email"] == "ann@example.com"
            # Written to after the upgrade: a new email is accepted and the old queue drains.
            answer = await client.post("/emails", json=email_body(), headers=headers)
            assert answer.status_code == 200, answer.text
        await upgraded.make_worker().run_until_idle()
        async with upgraded.db.read() as tx:
            statuses = await tx.conn.execute(select(metadata.tables["emails"].c.status))
            assert sorted(statuses.scalars()) == ["delivered"] * 3
    finally:
        await upgraded.close()
