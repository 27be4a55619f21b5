"""What the PostgreSQL cluster wrote between two moments: WAL bytes, full-page images, checkpoints.

A benchmark reads ``snapshot(dsn)`` at the edges of its phases and ``between(a, b)`` gives the
phase's share. WAL is the cluster's, not one database's: the benchmark's own probe and load
are in it too, which is why a phase is compared with another phase of the same run.

``pg_stat_wal`` (PostgreSQL 14+) counts the WAL records, full-page images and bytes written;
``pg_stat_bgwriter`` the checkpoints (timed or requested by WAL volume) and the buffers they
wrote. An unavailable view leaves its figures out rather than failing the benchmark.
"""

from __future__ import annotations

from typing import Any

import asyncpg

WAL = "SELECT wal_records, wal_fpi, wal_bytes::bigint, wal_write, wal_sync FROM pg_stat_wal"
CHECKPOINTS = (
    "SELECT checkpoints_timed, checkpoints_req, buffers_checkpoint, buffers_backend"
    " FROM pg_stat_bgwriter"
)


async def snapshot(dsn: str) -> dict[str, int]:
    """The cluster's WAL and checkpoint counters now ({} without a DSN: SQLite)."""
    if not dsn:
        return {}
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        found: dict[str, int] = {}
        for query in (WAL, CHECKPOINTS):
            try:
                row = await conn.fetchrow(query)
            except asyncpg.PostgresError:
                continue
            if row is not None:
                found.update({key: int(value) for key, value in row.items()})
        return found
    finally:
        await conn.close()


def between(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    """What was written from ``before`` to ``after``: MiB of WAL, records, full-page images,
    WAL syncs, checkpoints and the buffers they wrote."""
    moved = {key: after[key] - before[key] for key in before.keys() & after.keys()}
    if not moved:
        return {}
    figures: dict[str, Any] = {}
    if "wal_bytes" in moved:
        figures["wal_mib"] = round(moved["wal_bytes"] / 2**20, 1)
        figures["wal_records"] = moved["wal_records"]
        figures["full_page_images"] = moved["wal_fpi"]
        figures["wal_syncs"] = moved["wal_sync"]
    if "checkpoints_timed" in moved:
        figures["checkpoints"] = moved["checkpoints_timed"] + moved["checkpoints_req"]
        figures["checkpoint_buffers"] = moved["buffers_checkpoint"]
    return figures


def line(figures: dict[str, Any], seconds: float) -> str:
    """One sentence of a phase's writes, for a benchmark's table."""
    if not figures or "wal_mib" not in figures:
        return "WAL: not measured"
    rate = figures["wal_mib"] / seconds if seconds > 0 else 0.0
    return (
        f"WAL {figures['wal_mib']} MiB ({rate:.1f} MiB/s; {figures['full_page_images']:,}"
        f" full-page images, {figures['wal_syncs']:,} syncs), checkpoints:"
        f" {figures.get('checkpoints', '?')}"
    )
