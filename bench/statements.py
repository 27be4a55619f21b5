"""``python -m bench.statements``: what one ``POST /emails`` (and one batch) asks of the database.

Runs the app in-process (httpx's ASGI transport, no network) and lists every statement,
transaction boundary and pool checkout that one request causes, per backend. On PostgreSQL
each line is at least one round trip over the socket. On SQLite the lines are what SQLite ran
(sqlite3's trace callback): a statement sent through SQLAlchemy costs 3-4 round trips to the
aiosqlite connection thread, while the statements a repository sends together on the
connection's thread (``Tx.run_sqlite``: the batched inserts, events with their fan-out) and
``BEGIN`` share one.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event
from sqlalchemy.util import await_only

from bench import payload, server
from posthaste.api.app import create_app
from posthaste.bootstrap import build_services, migrate
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.models import KeyMode


def _listen(engine: Any, log: list[str]) -> None:
    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        log.append(" ".join(sql.split())[:90])

    def ran(sql: str) -> None:
        # An executemany shows its rows one by one, their values expanded: one line for them.
        line = " ".join(sql.split())
        head = line.partition(" VALUES (")[0][:70]
        if log and " VALUES (" in line and log[-1].startswith(head + " VALUES (... x"):
            rows = int(log[-1].rpartition(" x")[2].rstrip(")")) + 1
            log[-1] = f"{head} VALUES (... x{rows})"
        elif " VALUES (" in line:
            log.append(f"{head} VALUES (... x1)")
        else:
            log.append(line[:90])

    def checkout(dbapi_conn: Any, *_: Any) -> None:
        log.append("(pool checkout)")
        if engine.dialect.name == "sqlite":  # what SQLite runs, however it was sent
            await_only(dbapi_conn.driver_connection.set_trace_callback(ran))

    if engine.dialect.name != "sqlite":
        event.listen(engine, "before_cursor_execute", statement)
        event.listen(engine, "commit", lambda _conn: log.append("COMMIT"))
        event.listen(engine, "rollback", lambda _conn: log.append("ROLLBACK"))
    event.listen(engine.pool, "checkout", checkout)


async def trace(settings: Settings) -> dict[str, list[str]]:
    await migrate(settings)
    services = build_services(settings)
    try:
        team = await services.teams.create_team("bench", 0, 0)
        key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.TEST))
        log: list[str] = []
        _listen(services.db.engine.sync_engine, log)
        headers = {"Authorization": f"Bearer {key.token}", "Content-Type": "application/json"}
        transport = httpx.ASGITransport(app=create_app(services))
        traces: dict[str, list[str]] = {}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for name, path, body in (
                ("POST /emails", "/emails", payload.single_bodies(2)[1]),
                ("POST /emails/batch x100", "/emails/batch", payload.batch_bodies(100, 2)[1]),
            ):
                await client.post(path, content=body, headers=headers)  # warm caches
                log.clear()
                answer = await client.post(path, content=body, headers=headers)
                answer.raise_for_status()
                traces[name] = list(log)
        return traces
    finally:
        await services.close()


def _settings(backend: server.Backend) -> Settings:
    if backend.server_database_url:
        return Settings(database_url=backend.server_database_url, data_dir=backend.data_dir)
    return Settings(data_dir=backend.data_dir)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.statements", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    args = parser.parse_args()
    names = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for name in names:
        with (
            tempfile.TemporaryDirectory(prefix="posthaste-statements-") as tmp,
            server.prepared(name, Path(tmp)) as backend,
        ):
            traces = asyncio.run(trace(_settings(backend)))
        for request, lines in traces.items():
            kinds = Counter(line.split()[0] for line in lines)
            print(f"\n## {name}: {request} ({len(lines)} steps: {dict(kinds)})")
            print("\n".join(f"  {line}" for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
