"""Many rows in one statement: the batched writes of the send path and the delivery worker.

SQLAlchemy runs a list of parameter sets as ``executemany``: on PostgreSQL, asyncpg sends one
bind and execute per row and the server runs the statement once per row. For the hot batched
writes (a group commit's emails, a worker batch's status changes, events, jobs) PostgreSQL gets
one statement instead, with one array parameter per column:

    INSERT INTO t (a, b) SELECT * FROM unnest($1::VARCHAR[], $2::BIGINT[]) AS v(a, b)
    UPDATE t SET b = v.b FROM unnest($1::VARCHAR[], $2::BIGINT[]) AS v(a, b) WHERE t.a = v.a
    DELETE FROM t USING unnest($1::VARCHAR[], $2::INTEGER[]) AS v(a, b)
        WHERE t.a = v.a AND t.b = v.b

One execution whatever the number of rows, and a text that depends only on the table and the
columns, so the prepared statement is reused. Measured on 64-row inserts into ``events``, each
row cost about half the client CPU and half PostgreSQL's CPU that ``executemany`` did
(bench/README.md, Delivery). Values go through each column type's own bind processing first
(JSON serialised as the engine does), so what is stored is what ``executemany`` stores. SQLite
keeps ``executemany``: it runs in-process, where a row costs little.

Rows are plain column → value mappings with no Python-side defaults applied: give every column
the statement should set. Rows of different key sets are written as separate statements.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table, and_, bindparam, delete, update
from sqlalchemy.engine import Dialect

from posthaste.storage.database import Tx
from posthaste.storage.dialects import Forms

Row = Mapping[str, Any]
TableRows = tuple[Table, Sequence[Row]]
Part = tuple[Table, tuple[str, ...], Sequence[Row]]  # one INSERT: a table, its columns, rows
Shape = tuple[tuple[Table, tuple[str, ...]], ...]  # what an INSERT statement's text depends on
_Processor = Callable[[Any], Any] | None
SqliteInsert = tuple[str, list[tuple[Any, ...]]]  # an INSERT and its rows' parameters


async def insert_rows(tx: Tx, table: Table, rows: Sequence[Row]) -> None:
    """Insert ``rows``, one statement per set of keys."""
    await insert_tables(tx, [(table, rows)])


async def insert_tables(tx: Tx, tables: Sequence[TableRows]) -> None:
    """Insert rows into several tables; on PostgreSQL in one statement, each table's INSERT a
    data-modifying ``WITH`` of it (foreign keys are checked at the end of the statement, so a
    child's rows may come before its parent's). Elsewhere a statement per table, in order."""
    parts = insert_parts(tables)
    if parts:
        await tx.dialect.pick(_INSERT)(tx, parts)


async def _insert_postgres(tx: Tx, parts: Sequence[Part]) -> None:
    sql, processors = _insert_sql(tx.conn.dialect, shape_of(parts))
    await tx.conn.exec_driver_sql(sql, tuple(insert_params(parts, processors)))


async def _insert_sqlite(tx: Tx, parts: Sequence[Part]) -> None:
    await tx.run_sqlite(functools.partial(run_sqlite_inserts, sqlite_inserts(tx, parts)))


def sqlite_inserts(tx: Tx, parts: Sequence[Part]) -> list[SqliteInsert]:
    """SQLite: each part's INSERT and its rows' parameters, bind-processed as SQLAlchemy
    would (JSON serialised as the engine does), for ``run_sqlite_inserts``."""
    found = []
    for table, columns, group in parts:
        sql, processors = _sqlite_insert_sql(tx.conn.dialect, table, columns)
        found.append((sql, _tuples(group, columns, processors)))
    return found


def run_sqlite_inserts(statements: Sequence[SqliteInsert], connection: sqlite3.Connection) -> None:
    """On the connection's thread (``Tx.run_sqlite``): every INSERT, one ``executemany`` each."""
    for sql, params in statements:
        connection.executemany(sql, params)


@functools.cache
def _sqlite_insert_sql(
    dialect: Dialect, table: Table, columns: tuple[str, ...]
) -> tuple[str, list[_Processor]]:
    marks = ", ".join("?" for _ in columns)
    processors: list[_Processor] = [
        table.c[name].type._cached_bind_processor(dialect) for name in columns
    ]
    return f"{insert_into(dialect, table, columns)} VALUES ({marks})", processors


def _tuples(
    rows: Sequence[Row], columns: Sequence[str], processors: Sequence[_Processor]
) -> list[tuple[Any, ...]]:
    return [
        tuple(
            row[name] if process is None else process(row[name])
            for name, process in zip(columns, processors, strict=True)
        )
        for row in rows
    ]


_INSERT = Forms(postgresql=_insert_postgres, sqlite=_insert_sqlite)


def insert_parts(tables: Sequence[TableRows]) -> list[Part]:
    """The INSERTs ``tables`` need: one per table and set of keys, in order."""
    return [
        (table, columns, group)
        for table, rows in tables
        for columns, group in _shapes(rows).items()
    ]


def shape_of(parts: Sequence[Part]) -> Shape:
    """What the statement text depends on (the cache key of the statements built here)."""
    return tuple((table, columns) for table, columns, _ in parts)


@functools.cache
def inserts(dialect: Dialect, shape: Shape) -> tuple[list[str], list[list[_Processor]]]:
    """``INSERT … SELECT * FROM unnest(…)`` for each part of ``shape``, their parameters
    numbered from ``$1`` in order (a statement may go on with parts of its own after them), and
    the bind processors of each part's columns (``insert_params``)."""
    statements: list[str] = []
    processors: list[list[_Processor]] = []
    first = 1
    for table, columns in shape:
        source, column_processors = unnest(dialect, table, columns, first)
        statements.append(f"{insert_into(dialect, table, columns)} SELECT * FROM {source}")
        processors.append(column_processors)
        first += len(columns)
    return statements, processors


def with_parts(statements: Sequence[str]) -> str:
    """``w0 AS (…), w1 AS (…)``: statements run as data-modifying ``WITH`` parts."""
    return ", ".join(f"w{number} AS ({statement})" for number, statement in enumerate(statements))


def insert_params(parts: Sequence[Part], processors: Sequence[Sequence[_Processor]]) -> list[Any]:
    """The parameters of ``inserts``' statements: each part's column arrays, in order."""
    return [
        value
        for (_, columns, group), column_processors in zip(parts, processors, strict=True)
        for value in arrays(group, columns, column_processors)
    ]


async def insert_new_rows(tx: Tx, table: Table, rows: Sequence[Row]) -> None:
    """Insert ``rows``, leaving out those whose key the table already has (``ON CONFLICT DO
    NOTHING``), one statement per set of keys."""
    insert_shape = tx.dialect.pick(_INSERT_NEW)
    for columns, group in _shapes(rows).items():
        await insert_shape(tx, table, columns, group)


async def _insert_new_postgres(
    tx: Tx, table: Table, columns: tuple[str, ...], rows: Sequence[Row]
) -> None:
    sql, processors = _insert_new_sql(tx.conn.dialect, table, columns)
    await _execute(tx, sql, processors, columns, rows)


async def _insert_new_sqlite(
    tx: Tx, table: Table, columns: tuple[str, ...], rows: Sequence[Row]
) -> None:
    await tx.conn.execute(tx.dialect.insert(table).on_conflict_do_nothing(), rows)


_INSERT_NEW = Forms(postgresql=_insert_new_postgres, sqlite=_insert_new_sqlite)


async def update_rows(tx: Tx, table: Table, keys: Sequence[str], rows: Sequence[Row]) -> None:
    """Set each row's other columns where its ``keys`` columns match (a key given twice: the
    last row wins, as with ``executemany``)."""
    latest = {tuple(row[key] for key in keys): row for row in rows}
    update_shape = tx.dialect.pick(_UPDATE)
    for columns, group in _shapes(list(latest.values())).items():
        await update_shape(tx, table, tuple(keys), columns, group)


async def _update_postgres(
    tx: Tx, table: Table, keys: tuple[str, ...], columns: tuple[str, ...], rows: Sequence[Row]
) -> None:
    sql, processors = _update_sql(tx.conn.dialect, table, keys, columns)
    await _execute(tx, sql, processors, columns, rows)


async def _update_sqlite(
    tx: Tx, table: Table, keys: tuple[str, ...], columns: tuple[str, ...], rows: Sequence[Row]
) -> None:
    values: dict[str, Any] = {name: bindparam(f"v_{name}") for name in columns if name not in keys}
    query = update(table).where(_matching(table, keys)).values(values)
    await tx.conn.execute(query, _prefixed(rows, keys))


_UPDATE = Forms(postgresql=_update_postgres, sqlite=_update_sqlite)


async def delete_rows(tx: Tx, table: Table, rows: Sequence[Row]) -> None:
    """Delete the rows matching each row's columns."""
    delete_shape = tx.dialect.pick(_DELETE)
    for columns, group in _shapes(rows).items():
        await delete_shape(tx, table, columns, group)


async def _delete_postgres(
    tx: Tx, table: Table, columns: tuple[str, ...], rows: Sequence[Row]
) -> None:
    sql, processors = _delete_sql(tx.conn.dialect, table, columns)
    await _execute(tx, sql, processors, columns, rows)


async def _delete_sqlite(
    tx: Tx, table: Table, columns: tuple[str, ...], rows: Sequence[Row]
) -> None:
    query = delete(table).where(_matching(table, columns))
    await tx.conn.execute(query, _prefixed(rows, columns))


_DELETE = Forms(postgresql=_delete_postgres, sqlite=_delete_sqlite)


def _shapes(rows: Sequence[Row]) -> dict[tuple[str, ...], list[Row]]:
    shapes: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        shapes.setdefault(tuple(row), []).append(row)
    return shapes


def _matching(table: Table, keys: Sequence[str]) -> Any:
    return and_(*(table.c[key] == bindparam(f"k_{key}") for key in keys))


def _prefixed(rows: Sequence[Row], keys: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {(f"k_{name}" if name in keys else f"v_{name}"): value for name, value in row.items()}
        for row in rows
    ]


async def _execute(
    tx: Tx,
    sql: str,
    processors: Sequence[_Processor],
    columns: Sequence[str],
    rows: Sequence[Row],
) -> None:
    # Through SQLAlchemy's connection, not the driver's: it begins the transaction on first
    # use (a statement sent to the driver before that would commit on its own) and wraps errors.
    await tx.conn.exec_driver_sql(sql, arrays(rows, columns, processors))


def arrays(
    rows: Sequence[Row], columns: Sequence[str], processors: Sequence[_Processor]
) -> tuple[Any, ...]:
    """The parameters of an ``unnest``: one array per column, each value bind-processed."""
    params = []
    for name, process in zip(columns, processors, strict=True):
        values = [row[name] for row in rows]
        params.append(values if process is None else [process(value) for value in values])
    return tuple(params)


@functools.cache
def _insert_sql(dialect: Dialect, shape: Shape) -> tuple[str, list[list[_Processor]]]:
    """One INSERT per part; all but the last as ``WITH`` parts of the last."""
    statements, processors = inserts(dialect, shape)
    *earlier, last = statements
    if not earlier:
        return last, processors
    return f"WITH {with_parts(earlier)} {last}", processors


@functools.cache
def _insert_new_sql(
    dialect: Dialect, table: Table, columns: tuple[str, ...]
) -> tuple[str, list[_Processor]]:
    source, processors = unnest(dialect, table, columns)
    sql = f"{insert_into(dialect, table, columns)} SELECT * FROM {source} ON CONFLICT DO NOTHING"
    return sql, processors


@functools.cache
def _update_sql(
    dialect: Dialect, table: Table, keys: tuple[str, ...], columns: tuple[str, ...]
) -> tuple[str, list[_Processor]]:
    source, processors = unnest(dialect, table, columns)
    target = _quoted(dialect, table.name)
    sets = ", ".join(
        f"{_quoted(dialect, name)} = v.{_quoted(dialect, name)}"
        for name in columns
        if name not in keys
    )
    sql = f"UPDATE {target} SET {sets} FROM {source} WHERE {_join(dialect, target, keys)}"
    return sql, processors


@functools.cache
def _delete_sql(
    dialect: Dialect, table: Table, columns: tuple[str, ...]
) -> tuple[str, list[_Processor]]:
    source, processors = unnest(dialect, table, columns)
    target = _quoted(dialect, table.name)
    sql = f"DELETE FROM {target} USING {source} WHERE {_join(dialect, target, columns)}"
    return sql, processors


def insert_into(dialect: Dialect, table: Table, columns: Sequence[str]) -> str:
    names = ", ".join(_quoted(dialect, name) for name in columns)
    return f"INSERT INTO {_quoted(dialect, table.name)} ({names})"


def unnest(
    dialect: Dialect, table: Table, columns: Sequence[str], first: int = 1
) -> tuple[str, list[_Processor]]:
    """``unnest($first::T1[], …) AS v(c1, …)`` over ``table``'s ``columns`` (also for
    statements of a caller's own), and the bind processors ``arrays`` needs."""
    casts: list[str] = []
    processors: list[_Processor] = []
    for position, name in enumerate(columns, start=first):
        column_type = table.c[name].type
        # Without the length (VARCHAR(40) -> VARCHAR): an explicit cast would cut a value that
        # is too long where the column's own assignment refuses it, as an INSERT must.
        base = re.sub(r"\(.*\)", "", column_type.compile(dialect=dialect))
        casts.append(f"${position}::{base}[]")
        processors.append(column_type._cached_bind_processor(dialect))
    names = ", ".join(_quoted(dialect, name) for name in columns)
    return f"unnest({', '.join(casts)}) AS v({names})", processors


def _join(dialect: Dialect, target: str, keys: Sequence[str]) -> str:
    return " AND ".join(f"{target}.{_quoted(dialect, k)} = v.{_quoted(dialect, k)}" for k in keys)


def _quoted(dialect: Dialect, name: str) -> str:
    return str(dialect.identifier_preparer.quote(name))
