"""Migration 0007: the subject filter's own table, filled from the emails already stored, and
(PostgreSQL) the trigram index moved there from ``emails``."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from posthaste.config import Settings
from posthaste.core.ids import new_id, now_ms
from posthaste.storage.dialects import dialect_for
from posthaste.storage.migrate import alembic_config
from posthaste.storage.tables import email_subjects, emails, teams
from tests.conftest import PG_ADMIN_DSN, _pg_admin


@pytest.fixture
async def fresh_url(settings: Settings, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database of the backend, migrated by the test itself. (``settings`` applies
    conftest's rule first: no PostgreSQL is a skip, and a failure under CI.)"""
    if not settings.database_url.startswith("postgresql"):
        yield f"sqlite+aiosqlite:///{tmp_path / 'migrated.db'}"
        return
    name = f"posthaste_mig_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    await _pg_admin(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _migrate(url: str, revision: str) -> None:
    def upgrade(conn: Connection) -> None:
        config = alembic_config(url, dialect_for(url))
        config.attributes["connection"] = conn
        command.upgrade(config, revision)

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(upgrade)
    finally:
        await engine.dispose()


def _email(team_id: str, subject: str) -> dict[str, object]:
    return {
        "id": new_id(),
        "team_id": team_id,
        "mode": "test",
        "from_address": "a@acme.test",
        "from_lookup": "a@acme.test",
        "to": ["b@example.com"],
        "cc": [],
        "bcc": [],
        "reply_to": [],
        "subject": subject,
        "html": None,
        "text": "hi",
        "headers": {},
        "tags": {},
        "status": "delivered",
        "last_event": "email.delivered",
        "created_at": now_ms(),
        "stream_id": "outbound",
        "message_id": f"<{new_id()}@acme.test>",
        "region": "us-east-1",
        "attempts": 1,
    }


async def test_emails_stored_before_0007_are_found_by_subject(fresh_url: str) -> None:
    await _migrate(fresh_url, "0006")
    engine = create_async_engine(fresh_url)
    try:
        team_id = new_id()
        rows = [_email(team_id, "Invoice 7 is due"), _email(team_id, "Welcome")]
        async with engine.begin() as conn:
            await conn.execute(
                teams.insert().values(
                    id=team_id, name="t", rate_limit=0, daily_quota=0, created_at=now_ms()
                )
            )
            await conn.execute(emails.insert(), rows)
        await _migrate(fresh_url, "head")
        async with engine.connect() as conn:
            found = (await conn.execute(select(email_subjects))).all()
            assert sorted(found) == sorted((r["id"], team_id, r["subject"]) for r in rows)
            if conn.dialect.name == "postgresql":
                query = text(
                    "SELECT tablename, indexname FROM pg_indexes "
                    "WHERE indexname IN ('ix_emails_subject_trgm', 'ix_email_subjects_trgm')"
                )
                indexes = (await conn.execute(query)).all()
                assert indexes == [("email_subjects", "ix_email_subjects_trgm")]
    finally:
        await engine.dispose()
