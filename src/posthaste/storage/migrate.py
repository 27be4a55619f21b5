"""Schema migrations (Alembic), applied by ``posthaste migrate`` and at ``serve`` start.

Alembic is imported when a migration runs, not with this module: the processes ``serve``
supervises never migrate (the supervisor does, once), and it would add ~10 MiB to each.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection

from posthaste.storage.dialects import Dialect
from posthaste.storage.engine import create_async_engine

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(async_url: str, dialect: Dialect) -> Config:
    """Alembic's configuration for the database at ``async_url`` (``migrations/env.py`` reads
    the dialect from it)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", async_url.replace("%", "%%"))
    config.attributes["dialect"] = dialect
    return config


async def upgrade_to_head(async_url: str, dialect: Dialect) -> None:
    """Bring the schema to the newest revision; safe to run from several processes at once
    (on PostgreSQL an advisory lock serialises them)."""
    config = alembic_config(async_url, dialect)
    engine = create_async_engine(async_url)
    try:
        async with engine.connect() as conn, dialect.migrating(conn):
            await conn.run_sync(_upgrade, config)
            await conn.commit()
    finally:
        await engine.dispose()


def _upgrade(connection: Connection, config: Config) -> None:
    from alembic import command

    config.attributes["connection"] = connection
    command.upgrade(config, "head")
