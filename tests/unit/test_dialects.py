"""``storage.dialects``: the URL decides the dialect, once, and each dialect gives its own form of
whatever differs (no database: statements are compiled, not run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.dialects import postgresql, sqlite

from posthaste.storage.dialects import Dialect, Forms, PostgresDialect, SqliteDialect, dialect_for

_TABLE = Table(
    "things", MetaData(), Column("id", Integer, primary_key=True), Column("name", String)
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///./posthaste-data/posthaste.db", SqliteDialect),
        ("sqlite+aiosqlite:////var/lib/ph/db.sqlite", SqliteDialect),
        ("postgresql://ph:pw@db:5432/ph", PostgresDialect),
        ("postgres://ph@db/ph", PostgresDialect),
        ("postgresql+asyncpg://ph@db/ph", PostgresDialect),
    ],
)
def test_the_url_decides_the_dialect(url: str, expected: type[Dialect]) -> None:
    assert type(dialect_for(url)) is expected


@pytest.mark.parametrize("url", ["mysql://root@db/ph", "mssql+pyodbc://db/ph"])
def test_a_database_of_another_kind_has_no_dialect(url: str) -> None:
    with pytest.raises(ValueError, match="expected sqlite or postgresql"):
        dialect_for(url)


def test_each_dialect_picks_its_own_form() -> None:
    forms = Forms(postgresql="the PostgreSQL form", sqlite="the SQLite form")
    assert PostgresDialect().pick(forms) == "the PostgreSQL form"
    assert SqliteDialect().pick(forms) == "the SQLite form"


def test_insert_is_the_dialects_own_with_its_on_conflict_clause() -> None:
    pg = PostgresDialect().insert(_TABLE).values(id=1, name="a").on_conflict_do_nothing()
    lite = SqliteDialect().insert(_TABLE).values(id=1, name="a").on_conflict_do_nothing()
    assert "ON CONFLICT DO NOTHING" in str(pg.compile(dialect=postgresql.dialect()))
    assert "ON CONFLICT DO NOTHING" in str(lite.compile(dialect=sqlite.dialect()))
    assert isinstance(pg, postgresql.Insert) and isinstance(lite, sqlite.Insert)


def test_among_is_one_array_parameter_on_postgresql_whatever_the_count() -> None:
    texts = {
        str(
            select(_TABLE.c.id)
            .where(PostgresDialect().among(_TABLE.c.name, ["a"] * count))
            .compile(dialect=postgresql.dialect())
        )
        for count in (1, 2, 50)
    }
    assert len(texts) == 1  # one statement text: one prepared statement and plan
    assert "things.name = ANY (%(things_name_any)s::VARCHAR[])" in texts.pop()


def test_among_is_in_on_sqlite() -> None:
    query = select(_TABLE.c.id).where(SqliteDialect().among(_TABLE.c.name, ["a", "b"]))
    compiled = query.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True})
    assert "things.name IN ('a', 'b')" in str(compiled)


def test_only_sqlite_needs_the_data_directory_made(tmp_path: Path) -> None:
    PostgresDialect().prepare(tmp_path / "fleet")
    SqliteDialect().prepare(tmp_path / "one" / "machine")
    assert [p.name for p in tmp_path.iterdir()] == ["one"]
    assert (tmp_path / "one" / "machine").is_dir()


def test_only_sqlite_alters_tables_by_copying_them() -> None:
    assert SqliteDialect().alters_by_copy and not PostgresDialect().alters_by_copy
