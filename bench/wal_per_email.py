"""``python -m bench.wal_per_email``: what one email writes to PostgreSQL's WAL, table by table.

On a fresh database (the real services, in process), ``--emails`` emails are accepted through
``SendingService.accept_batch`` (batches of 100, 4 in flight, as ``bench.accept_cost`` does)
after a ``CHECKPOINT``; then one status change (``status``, an indexed column) and one change of
a column no index holds (``attempts``) are made to 1,000 of them by plain ``UPDATE``s, as the
delivery's start and finish change an email's row. For each step, ``pg_walinspect`` (a contrib
extension of PostgreSQL 15+; this creates it, so the role must be allowed to) reads the WAL
records written and gives the bytes per email by resource manager (heap, B-tree, GIN) and by
relation (table or index).

    python -m bench.wal_per_email [--emails 4000]
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
from pathlib import Path
from typing import Any

import asyncpg
import uvloop
from tests.senders import AnySender

from bench import accept_cost
from bench.broadcast import principal_of
from bench.server import SECRET_KEY, prepared
from posthaste.bootstrap import build_services, migrate
from posthaste.config import Settings

BLOCK_REF = re.compile(r"rel \d+/\d+/(\d+)")
CHANGES = (
    (
        "a status change (an indexed column)",
        "UPDATE emails SET status = 'sending'"
        " WHERE id IN (SELECT id FROM emails ORDER BY id LIMIT 1000)",
    ),
    (
        "a change of a column no index holds (attempts)",
        "UPDATE emails SET attempts = attempts + 1"
        " WHERE id IN (SELECT id FROM emails ORDER BY id DESC LIMIT 1000)",
    ),
)


async def _flushed(conn: asyncpg.Connection) -> Any:
    """The WAL flushed so far, after a commit of our own (``pg_walinspect`` reads no further)."""
    await conn.execute("SELECT txid_current()")
    return await conn.fetchval("SELECT pg_current_wal_flush_lsn()")


async def breakdown(conn: asyncpg.Connection, start: Any, end: Any, emails: int) -> dict[str, Any]:
    """Bytes of WAL per email from ``start`` to ``end``: in all, by resource manager, by
    relation (the first block a record references)."""
    names = {
        row["node"]: row["relname"]
        for row in await conn.fetch(
            "SELECT pg_relation_filenode(oid) AS node, relname FROM pg_class"
            " WHERE pg_relation_filenode(oid) IS NOT NULL"
        )
    }
    by_manager: collections.Counter[str] = collections.Counter()
    by_relation: collections.Counter[str] = collections.Counter()
    records: collections.Counter[str] = collections.Counter()
    for record in await conn.fetch(
        "SELECT resource_manager, record_length, block_ref FROM pg_get_wal_records_info($1, $2)",
        start,
        end,
    ):
        found = BLOCK_REF.search(record["block_ref"] or "")
        relation = names.get(int(found.group(1)), found.group(1)) if found else "(no relation)"
        by_manager[record["resource_manager"]] += record["record_length"]
        by_relation[relation] += record["record_length"]
        records[relation] += 1
    return {
        "bytes_per_email": round(sum(by_manager.values()) / emails),
        "by_resource_manager": {
            name: round(size / emails) for name, size in by_manager.most_common()
        },
        "by_relation": {
            name: {"bytes": round(size / emails), "records": round(records[name] / emails, 2)}
            for name, size in by_relation.most_common()
        },
    }


async def measure(database_url: str, data_dir: Path, emails: int) -> dict[str, Any]:
    settings = Settings(
        database_url=database_url, data_dir=data_dir, secret_key=SECRET_KEY, log_level="warning"
    )
    await migrate(settings)
    services = build_services(settings, senders=AnySender(settings.default_region))
    conn = await asyncpg.connect(database_url)  # ``prepared``'s URL is a plain postgresql://
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        who = await principal_of(services, "batcher")
        await conn.execute("CHECKPOINT")
        start = await conn.fetchval("SELECT pg_current_wal_insert_lsn()")
        await accept_cost.batches(services, who, emails, 4, database_url)
        # Every email accepted in the window, ``batches``'s warming round included.
        total = await conn.fetchval("SELECT count(*) FROM emails")
        result = {"accepted": await breakdown(conn, start, await _flushed(conn), total)}
        for label, statement in CHANGES:
            start = await conn.fetchval("SELECT pg_current_wal_insert_lsn()")
            await conn.execute(statement)
            result[label] = await breakdown(conn, start, await _flushed(conn), 1000)
        return result
    finally:
        await conn.close()
        await services.close()


def report(result: dict[str, Any]) -> str:
    lines = []
    for label, figures in result.items():
        lines.append(f"{label}: {figures['bytes_per_email']:,} bytes of WAL per email")
        managers = ", ".join(f"{k} {v:,}" for k, v in figures["by_resource_manager"].items())
        lines.append(f"  by kind: {managers}")
        for name, f in list(figures["by_relation"].items())[:24]:
            lines.append(f"  {name:40} {f['bytes']:6,} B  {f['records']:5} records")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wal_per_email", description=__doc__)
    parser.add_argument("--emails", type=int, default=4000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir, prepared("postgres", Path(workdir)) as backend:
        result = uvloop.run(measure(backend.server_database_url, backend.data_dir, args.emails))
    print(report(result))


if __name__ == "__main__":
    main()
