"""Shared fixtures: every storage, queue and API test runs on SQLite and on PostgreSQL.

PostgreSQL: one fresh database per test session (and per xdist worker), created and dropped
here; tables are emptied between tests. Under CI=true a missing PostgreSQL fails the run.
SQLite: the migrated schema is built once and copied into each test's own directory.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import fastapi.dependencies.models
import httpx
import hypothesis
import pytest
from sqlalchemy import text

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.models import KeyMode, Permission, Team
from posthaste.storage.dialects import PostgresDialect, SqliteDialect
from posthaste.storage.migrate import upgrade_to_head
from posthaste.storage.tables import metadata
from tests.apps import make_app
from tests.dns_server import ZoneServer, running_zone
from tests.openapi_check import checked_client

# Speed is measured in bench/, never in tests: no per-example deadline, so a loaded CI machine
# cannot fail a property test for being slow.
hypothesis.settings.register_profile("posthaste", deadline=None)
hypothesis.settings.load_profile("posthaste")

# FastAPI remembers what it learned of each endpoint function in module-level caches of 4,096
# entries. Among them are the closures every app makes for its own /openapi.json and /docs,
# each holding its whole app (~50,000 objects): a test process kept every test's app, and its
# garbage collections slowed as they piled up (2 GB per worker). A server has one app.
_FASTAPI_CACHES = [
    value for value in vars(fastapi.dependencies.models).values() if hasattr(value, "cache_clear")
]

PG_ADMIN_DSN = os.environ.get("POSTHASTE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SECRET = "test-secret-key-" + "x" * 32


async def _pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    name = f"posthaste_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI=true and is unreachable: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN_DSN}: {exc}")
    base = PG_ADMIN_DSN.rsplit("/", 1)[0]
    url = f"{base}/{name}"
    async_url = url.replace("postgresql://", "postgresql+asyncpg://", 1)
    asyncio.run(upgrade_to_head(async_url, PostgresDialect()))
    yield url
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("schema") / "template.db"
    asyncio.run(upgrade_to_head(f"sqlite+aiosqlite:///{path}", SqliteDialect()))
    return path


@pytest.fixture(autouse=True)
def _forget_apps() -> Iterator[None]:
    yield
    for cache in _FASTAPI_CACHES:
        cache.cache_clear()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        shutil.copy(template, tmp_path / "posthaste.db")
        url = f"sqlite:///{tmp_path / 'posthaste.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    return Settings(
        database_url=url,
        data_dir=tmp_path,
        secret_key=SECRET,
        delivery_retry_schedule=(0.2, 0.2, 0.2),
    )


_TABLES_WITH_ROWS = text(
    " UNION ALL ".join(
        f"SELECT '{table.name}' WHERE EXISTS (SELECT FROM {table.name})"
        for table in metadata.sorted_tables
    )
)


async def _empty_tables(services: Services) -> None:
    """Delete what the previous test left, children before parents. A test leaves rows in a
    few tables; a TRUNCATE of every table cost 130-320 ms per test (a new file per table and
    index), a DELETE of the few non-empty ones a few milliseconds."""
    if not isinstance(services.db.dialect, PostgresDialect):
        return  # SQLite: each test has its own copy of the migrated file
    async with services.db.transaction() as tx:
        filled = set((await tx.conn.execute(_TABLES_WITH_ROWS)).scalars())
        for table in reversed(metadata.sorted_tables):
            if table.name in filled:
                await tx.conn.execute(table.delete())


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    built = build_services(settings)
    await _empty_tables(built)
    await built.db.start_listening()
    yield built
    await built.close()


@dataclass
class Tenant:
    """A team with a live, a test and a sending-only key, as a customer would have."""

    team: Team
    live: str
    test: str
    sending: str

    def headers(self, which: str = "test") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, which)}"}


async def make_tenant(
    services: Services, name: str | None = None, *, rate_limit: int = 0, daily_quota: int = 0
) -> Tenant:
    team = await services.teams.create_team(
        name or f"team-{uuid.uuid4().hex[:8]}", rate_limit, daily_quota
    )
    keys = services.api_keys
    live = await keys.create(team.id, NewApiKey("live", KeyMode.LIVE))
    test = await keys.create(team.id, NewApiKey("test", KeyMode.TEST))
    sending = await keys.create(team.id, NewApiKey("send", KeyMode.TEST, Permission.SENDING_ACCESS))
    return Tenant(team, live.token, test.token, sending.token)


@pytest.fixture
async def tenant(services: Services) -> Tenant:
    return await make_tenant(services)


@pytest.fixture
async def client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    # Every answer is checked against /openapi.json (status and body): the document never
    # drifts from what the API returns.
    async with checked_client(make_app(services)) as http:
        yield http


@pytest.fixture
def zone() -> Iterator[ZoneServer]:
    """A real DNS server on loopback; pass ``zone.nameservers`` as ``dns_nameservers``."""
    yield from running_zone()
