"""The blob store's writes: a large blob on PostgreSQL goes in pieces, before the statement
that stores the rest.

asyncpg holds a bytea parameter about three times while it sends it (its argument buffer,
grown by doubling, and its Bind message) and more when blobs go as an array: a 25 MB message
in one statement took two to six times its size on top of what the caller holds. A blob of
``PIECE_BYTES`` or more is written to a PostgreSQL large object a piece at a time
(``lo_from_bytea``, ``lo_put``), its ``blobs`` row stored from it on the server (``lo_get``)
and the object unlinked by the same statement, all in the caller's transaction: asyncpg
holds one piece at a time, and no large object outlives the transaction (a rollback or a
lost connection takes it away with the rest). The stored row is the same ``bytea`` a small
blob gets, read, purged and dumped like any other.

SQLite binds a blob where it is (its own copy is the library's), but a blob in parts (a
message with header fields on top) would have to be joined first, one more copy of it: a large
one is inserted as a ``zeroblob`` of its size and its parts written into it where they are
(``sqlite3.Blob``), in the caller's transaction, on the connection's thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from posthaste.storage.database import Tx
from posthaste.storage.dialects import Forms

if TYPE_CHECKING:
    import sqlite3

PIECE_BYTES = 1024 * 1024

# A ``blobs`` row: id, team_id, created_at and its data, as bytes or as parts in order (a
# relay's message with header lines on top), joined only where one buffer is needed.
BlobRow = dict[str, Any]
Statement = Callable[[list[BlobRow]], Awaitable[None]]


def in_pieces(size: int) -> bool:
    """Whether a blob of ``size`` bytes is written apart, in pieces, where pieces are used."""
    return size >= PIECE_BYTES


async def store_blobs_with(tx: Tx, rows: Sequence[BlobRow], statement: Statement) -> None:
    """Store ``rows`` of ``blobs`` with ``statement``, the caller's write, which is given the
    rows it is to insert itself (their data as one ``bytes``): all of them, but for the large
    ones that the database wants written apart (see the module). No round trip more when none
    is large. In an autocommit unit the pieces and the statement go in one transaction."""
    await tx.dialect.pick(_STORE)(tx, rows, statement)


async def _store_postgres(tx: Tx, rows: Sequence[BlobRow], statement: Statement) -> None:
    large = [row for row in rows if in_pieces(size(row["data"]))]
    left = [_joined(row) for row in rows if not in_pieces(size(row["data"]))]
    if not large:
        await statement(left)
        return
    async with _one_transaction(tx):
        for row in large:
            await _write_in_pieces(tx, row)
        await statement(left)


def _one_transaction(tx: Tx) -> contextlib.AbstractAsyncContextManager[Any]:
    """An autocommit unit commits each statement by itself: a transaction around them, so that
    no piece, row or large object is left behind if one fails. A transaction's own: nothing."""
    if tx.driver is None:
        return contextlib.nullcontext()
    transaction: contextlib.AbstractAsyncContextManager[Any] = tx.driver.transaction()
    return transaction


async def _write_in_pieces(tx: Tx, row: BlobRow) -> None:
    pieces = _pieces(row["data"])
    [(oid,)] = await tx.fetch_pg("SELECT lo_from_bytea(0, $1::bytea)", next(pieces))
    offset = PIECE_BYTES
    for piece in pieces:
        await tx.fetch_pg("SELECT lo_put($1::oid, $2::bigint, $3::bytea)", oid, offset, piece)
        offset += len(piece)
    # RETURNING runs once the row is in, read from the object: the object goes with it.
    await tx.fetch_pg(
        "INSERT INTO blobs (id, team_id, data, created_at)"
        " VALUES ($1, $2, lo_get($3::oid), $4) RETURNING lo_unlink($3::oid)",
        row["id"],
        row["team_id"],
        oid,
        row["created_at"],
    )


def _pieces(data: bytes | Sequence[bytes]) -> Iterator[bytes]:
    """``data`` in pieces of ``PIECE_BYTES`` (the last one shorter), across its parts."""
    piece = bytearray()
    for part in [data] if isinstance(data, bytes) else data:
        view = memoryview(part)
        while view:
            taken = view[: PIECE_BYTES - len(piece)]
            piece += taken
            view = view[len(taken) :]
            if len(piece) == PIECE_BYTES:
                yield bytes(piece)
                piece = bytearray()
    if piece:
        yield bytes(piece)


def size(data: bytes | Sequence[bytes]) -> int:
    """A blob row's data size, in bytes or in parts."""
    return len(data) if isinstance(data, bytes) else sum(len(part) for part in data)


def _joined(row: BlobRow) -> BlobRow:
    data = row["data"]
    if isinstance(data, bytes):
        return row
    only = data[0] if len(data) == 1 else None
    return {**row, "data": only if isinstance(only, bytes) else b"".join(data)}


async def _store_sqlite(tx: Tx, rows: Sequence[BlobRow], statement: Statement) -> None:
    parted = [row for row in rows if _parted(row) and in_pieces(size(row["data"]))]
    if parted:
        await tx.run_sqlite(lambda conn: _write_in_place(conn, parted))
    await statement([_joined(row) for row in rows if not any(row is p for p in parted)])


def _parted(row: BlobRow) -> bool:
    return not isinstance(row["data"], bytes)


def _write_in_place(conn: sqlite3.Connection, rows: Sequence[BlobRow]) -> None:
    for row in rows:
        cursor = conn.execute(
            "INSERT INTO blobs (id, team_id, data, created_at) VALUES (?, ?, zeroblob(?), ?)",
            (row["id"], row["team_id"], size(row["data"]), row["created_at"]),
        )
        assert cursor.lastrowid is not None
        with conn.blobopen("blobs", "data", cursor.lastrowid) as blob:
            for part in row["data"]:
                blob.write(part)


_STORE = Forms(postgresql=_store_postgres, sqlite=_store_sqlite)
