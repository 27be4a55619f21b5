"""Many rows in one statement: the batched writes of the send path and the delivery worker.

SQLAlchemy runs a list of parameter sets as ``executemany``: on PostgreSQL, asyncpg sends one
bind and execute per row and the server runs the statement once per row. For the hot batched
writes (a group commit's emails, a worker batch's status changes, events, jobs) PostgreSQL gets
one statement instead, with one array parameter per column:

    INSERT INTO t (a, b) SELECT * FROM unnest($1::VARCHAR[], $2::BIGINT[]) AS v(a, b)
    UPDATE t SET b = v.b FROM unnest($1::VARCHAR[], $2::BIGINT[]) AS v(a, b) WHERE t.a = v.a
    DELETE FROM t USING unnest($1::VARCHAR[], $2::INTEGER[]) AS v(a, b)
        WHERE t.a = v.a AND t.b = v.b

or, from ``JSON_FROM_ROWS`` rows in the statement and for a table without binary columns, with
the rows as one JSON text instead of the arrays (``source``): ``INSERT INTO t (a, b) SELECT *
FROM (SELECT a, b FROM json_populate_recordset(NULL::t, $1::json)) AS v``. asyncpg checks every
element of an array parameter against abstract classes before encoding it (a third of the API
process's CPU under ``POST /emails/batch``); orjson writes the rows in a fraction of that and a
text parameter costs asyncpg nothing, while PostgreSQL spends about as much on a group of 100
emails and somewhat more on larger and smaller ones (bench/README.md, Accepting email).

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
from typing import Any, NamedTuple

import orjson
from sqlalchemy import JSON, Boolean, LargeBinary, Table, and_, bindparam, delete, update
from sqlalchemy.engine import Dialect

from posthaste.storage.database import Tx
from posthaste.storage.dialects import Forms

Row = Mapping[str, Any]
TableRows = tuple[Table, Sequence[Row]]
Part = tuple[Table, tuple[str, ...], Sequence[Row]]  # one INSERT: a table, its columns, rows
# What an INSERT statement's text depends on: each part's table, columns and whether it is
# one row (``source``).
Shape = tuple[tuple[Table, tuple[str, ...], bool], ...]
_Processor = Callable[[Any], Any] | None
SqliteInsert = tuple[str, list[tuple[Any, ...]]]  # an INSERT and its rows' parameters

# From this many rows in a statement, its rows go as JSON text (``source``): below it the
# arrays cost PostgreSQL less (``json_populate_recordset`` has a cost per call) and the client
# little (bench/README.md, Accepting email).
JSON_FROM_ROWS = 256


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
    sql, sources = _insert_sql(tx.conn.dialect, shape_of(parts), in_json(parts))
    await tx.fetch_pg(sql, *insert_params(parts, sources))


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


def in_json(parts: Sequence[Part]) -> bool:
    """Whether a statement writing ``parts`` gets its rows as JSON (``source``)."""
    return sum(len(group) for _, _, group in parts) >= JSON_FROM_ROWS


def shape_of(parts: Sequence[Part]) -> Shape:
    """What the statement text depends on (the cache key of the statements built here)."""
    return tuple((table, columns, len(group) == 1) for table, columns, group in parts)


@functools.cache
def inserts(dialect: Dialect, shape: Shape, as_json: bool) -> tuple[list[str], list[Source]]:
    """``INSERT … SELECT * FROM`` each part's ``source``, their parameters numbered from ``$1``
    in order (a statement may go on with parts of its own after them), and the sources
    (``insert_params``)."""
    statements: list[str] = []
    sources: list[Source] = []
    first = 1
    for table, columns, one in shape:
        found = source(dialect, table, columns, first, as_json=as_json, one_row=one)
        statements.append(f"{insert_into(dialect, table, columns)} SELECT * FROM {found.sql}")
        sources.append(found)
        first += found.params
    return statements, sources


def with_parts(statements: Sequence[str]) -> str:
    """``w0 AS (…), w1 AS (…)``: statements run as data-modifying ``WITH`` parts."""
    return ", ".join(f"w{number} AS ({statement})" for number, statement in enumerate(statements))


def insert_params(parts: Sequence[Part], sources: Sequence[Source]) -> list[Any]:
    """The parameters of ``inserts``' statements: each part's, in order."""
    return [
        value
        for (_, _, group), found in zip(parts, sources, strict=True)
        for value in found.encode(group)
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
    sql, found = _insert_new_sql(tx.conn.dialect, table, columns, _as_json(rows))
    await _execute(tx, sql, found, rows)


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
    sql, found = _update_sql(tx.conn.dialect, table, keys, columns, _as_json(rows))
    await _execute(tx, sql, found, rows)


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
    sql, found = _delete_sql(tx.conn.dialect, table, columns, _as_json(rows))
    await _execute(tx, sql, found, rows)


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


async def _execute(tx: Tx, sql: str, found: Source, rows: Sequence[Row]) -> None:
    # On the driver, the unit's transaction begun first, errors as SQLAlchemy's (``Tx.fetch_pg``).
    await tx.fetch_pg(sql, *found.encode(rows))


def arrays(
    columns: Sequence[str], processors: Sequence[_Processor], rows: Sequence[Row]
) -> tuple[Any, ...]:
    """The parameters of an ``unnest``: one array per column, each value bind-processed."""
    params = []
    for name, process in zip(columns, processors, strict=True):
        values = [row[name] for row in rows]
        params.append(values if process is None else [process(value) for value in values])
    return tuple(params)


@functools.cache
def _insert_sql(dialect: Dialect, shape: Shape, as_json: bool) -> tuple[str, list[Source]]:
    """One INSERT per part; all but the last as ``WITH`` parts of the last."""
    statements, sources = inserts(dialect, shape, as_json)
    *earlier, last = statements
    if not earlier:
        return last, sources
    return f"WITH {with_parts(earlier)} {last}", sources


@functools.cache
def _insert_new_sql(
    dialect: Dialect, table: Table, columns: tuple[str, ...], as_json: bool
) -> tuple[str, Source]:
    found = source(dialect, table, columns, as_json=as_json)
    sql = f"{insert_into(dialect, table, columns)} SELECT * FROM {found.sql} ON CONFLICT DO NOTHING"
    return sql, found


@functools.cache
def _update_sql(
    dialect: Dialect, table: Table, keys: tuple[str, ...], columns: tuple[str, ...], as_json: bool
) -> tuple[str, Source]:
    found = source(dialect, table, columns, as_json=as_json)
    target = _quoted(dialect, table.name)
    sets = ", ".join(
        f"{_quoted(dialect, name)} = v.{_quoted(dialect, name)}"
        for name in columns
        if name not in keys
    )
    sql = f"UPDATE {target} SET {sets} FROM {found.sql} WHERE {_join(dialect, target, keys)}"
    return sql, found


@functools.cache
def _delete_sql(
    dialect: Dialect, table: Table, columns: tuple[str, ...], as_json: bool
) -> tuple[str, Source]:
    found = source(dialect, table, columns, as_json=as_json)
    target = _quoted(dialect, table.name)
    sql = f"DELETE FROM {target} USING {found.sql} WHERE {_join(dialect, target, columns)}"
    return sql, found


def insert_into(dialect: Dialect, table: Table, columns: Sequence[str]) -> str:
    names = ", ".join(_quoted(dialect, name) for name in columns)
    return f"INSERT INTO {_quoted(dialect, table.name)} ({names})"


class Source(NamedTuple):
    """Rows as a ``FROM`` item, ``… AS v`` with the given columns: its text, how many
    parameters it takes, and what makes them from the rows."""

    sql: str
    params: int
    encode: Callable[[Sequence[Row]], tuple[Any, ...]]


@functools.cache
def source(
    dialect: Dialect,
    table: Table,
    columns: tuple[str, ...],
    first: int = 1,
    *,
    as_json: bool,
    one_row: bool = False,
) -> Source:
    """``table``'s ``columns`` of rows given as parameters from ``$first``: ``as_json``, one
    JSON text (``json_populate_recordset``), else, or with a binary column, which JSON would
    carry as hex, one array per column (``unnest``); ``one_row`` (and not ``as_json``), one
    parameter per column (``VALUES``): PostgreSQL plans it for less than an ``unnest``, and
    asyncpg encodes a value for less than an array of one (a lone send's statement: every
    table but its recipients has one row; bench/README.md, Accepting email)."""
    if one_row and not as_json:
        sql, processors = values_row(dialect, table, columns, first)
        return Source(sql, len(columns), functools.partial(_one_row, columns, processors))
    types = [table.c[name].type for name in columns]
    if not as_json or any(isinstance(column_type, LargeBinary) for column_type in types):
        sql, processors = unnest(dialect, table, columns, first)
        return Source(sql, len(columns), functools.partial(arrays, columns, processors))
    # A JSON column's value is reproduced as given; Python's None is JSON's null there (as
    # the column's bind processing stores it), not SQL's NULL, which json_populate_recordset
    # makes of it.
    quoted = [_quoted(dialect, name) for name in columns]
    names = ", ".join(
        f"COALESCE({name}, 'null'::json) AS {name}" if isinstance(t, JSON) else name
        for name, t in zip(quoted, types, strict=True)
    )
    target = _quoted(dialect, table.name)
    sql = f"(SELECT {names} FROM json_populate_recordset(NULL::{target}, ${first}::json)) AS v"
    booleans = tuple(name for name, t in zip(columns, types, strict=True) if isinstance(t, Boolean))
    return Source(sql, 1, functools.partial(_json_rows, booleans))


def _as_json(rows: Sequence[Row]) -> bool:
    return len(rows) >= JSON_FROM_ROWS


def _json_rows(booleans: tuple[str, ...], rows: Sequence[Row]) -> tuple[str]:
    """The rows as one JSON array of objects (a Boolean column's value as a JSON boolean,
    as its bind processing makes it)."""
    if booleans:
        rows = [
            {**row, **{name: None if row[name] is None else bool(row[name]) for name in booleans}}
            for row in rows
        ]
    listed = [row if type(row) is dict else dict(row) for row in rows]
    return (orjson.dumps(listed).decode(),)


def unnest(
    dialect: Dialect, table: Table, columns: Sequence[str], first: int = 1
) -> tuple[str, list[_Processor]]:
    """``unnest($first::T1[], …) AS v(c1, …)`` over ``table``'s ``columns`` (also for
    statements of a caller's own), and the bind processors ``arrays`` needs."""
    casts, processors = _casts(dialect, table, columns, first, "[]")
    names = ", ".join(_quoted(dialect, name) for name in columns)
    return f"unnest({', '.join(casts)}) AS v({names})", processors


def values_row(
    dialect: Dialect, table: Table, columns: Sequence[str], first: int = 1
) -> tuple[str, list[_Processor]]:
    """``(VALUES ($first::T1, …)) AS v(c1, …)``: one row of ``table``'s ``columns``, and the
    bind processors ``_one_row`` needs."""
    casts, processors = _casts(dialect, table, columns, first, "")
    names = ", ".join(_quoted(dialect, name) for name in columns)
    return f"(VALUES ({', '.join(casts)})) AS v({names})", processors


def _casts(
    dialect: Dialect, table: Table, columns: Sequence[str], first: int, suffix: str
) -> tuple[list[str], list[_Processor]]:
    casts: list[str] = []
    processors: list[_Processor] = []
    for position, name in enumerate(columns, start=first):
        column_type = table.c[name].type
        # Without the length (VARCHAR(40) -> VARCHAR): an explicit cast would cut a value that
        # is too long where the column's own assignment refuses it, as an INSERT must.
        base = re.sub(r"\(.*\)", "", column_type.compile(dialect=dialect))
        casts.append(f"${position}::{base}{suffix}")
        processors.append(column_type._cached_bind_processor(dialect))
    return casts, processors


def _one_row(
    columns: Sequence[str], processors: Sequence[_Processor], rows: Sequence[Row]
) -> tuple[Any, ...]:
    """The parameters of ``values_row``: the one row's values, each bind-processed."""
    [row] = rows
    return tuple(
        row[name] if process is None else process(row[name])
        for name, process in zip(columns, processors, strict=True)
    )


def _join(dialect: Dialect, target: str, keys: Sequence[str]) -> str:
    return " AND ".join(f"{target}.{_quoted(dialect, k)} = v.{_quoted(dialect, k)}" for k in keys)


def _quoted(dialect: Dialect, name: str) -> str:
    return str(dialect.identifier_preparer.quote(name))
