"""SQLite: a connection goes back to the pool with no transaction open, even from a unit that was
cancelled while its BEGIN waited on the connection's thread (the BEGIN runs after the pool took
the connection back; found by the fuzz run's one-second reads of the event stream)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import pytest
from sqlalchemy import event, text

from posthaste.bootstrap import Services
from posthaste.storage import dialects


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_unit_cancelled_while_its_begin_waits_leaves_no_transaction_behind(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    begin_waits, go_on, reset_seen = threading.Event(), threading.Event(), threading.Event()
    execute = dialects._execute

    def held_begin(statement: str, connection: sqlite3.Connection) -> None:
        if statement.startswith("BEGIN") and not go_on.is_set():
            begin_waits.set()
            go_on.wait(60)
        execute(statement, connection)

    def seen(*_: Any) -> None:
        reset_seen.set()

    monkeypatch.setattr(dialects, "_execute", held_begin)
    pool = services.db.engine.sync_engine.pool
    event.listen(pool, "reset", seen, insert=True)  # before the dialect's own

    async def read() -> None:
        async with services.db.read() as tx:
            await tx.conn.execute(text("SELECT 1"))

    task = asyncio.create_task(read())
    assert await asyncio.to_thread(begin_waits.wait, 60)
    task.cancel()
    # The pool takes the connection back while the BEGIN still waits; then the BEGIN runs.
    assert await asyncio.to_thread(reset_seen.wait, 60)
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    event.remove(pool, "reset", seen)

    for _ in range(20):  # every pooled connection, in turn: each starts a transaction of its own
        async with services.db.transaction() as tx:
            assert (await tx.conn.execute(text("SELECT 1"))).scalar() == 1
