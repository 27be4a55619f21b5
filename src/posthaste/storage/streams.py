"""Message streams, keyed by (team, slug)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update

from posthaste.core.models import Stream
from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.tables import streams


def _stream(row: Any) -> Stream:
    return Stream(row.id, row.team_id, row.name, row.type, row.created_at, row.pool)


async def insert_stream(tx: Tx, stream: Stream) -> bool:
    """Insert; False when the team already has a stream with this id."""
    query = (
        insert_for(tx, streams)
        .values(
            team_id=stream.team_id,
            id=stream.id,
            name=stream.name,
            type=stream.type,
            created_at=stream.created_at,
            pool=stream.pool,
        )
        .on_conflict_do_nothing()
    )
    result = await tx.conn.execute(query)
    return bool(result.rowcount)


async def get_stream(tx: Tx, team_id: str, stream_id: str) -> Stream | None:
    query = select(streams).where(streams.c.team_id == team_id, streams.c.id == stream_id)
    row = (await tx.conn.execute(query)).first()
    return _stream(row) if row else None


async def list_streams(tx: Tx, team_id: str) -> list[Stream]:
    query = select(streams).where(streams.c.team_id == team_id).order_by(streams.c.created_at)
    return [_stream(r) for r in await tx.conn.execute(query)]


async def update_stream(tx: Tx, stream: Stream) -> bool:
    """Write a stream's changeable fields (name, pool); False when the team has no such one."""
    query = (
        update(streams)
        .where(streams.c.team_id == stream.team_id, streams.c.id == stream.id)
        .values(name=stream.name, pool=stream.pool)
    )
    return bool((await tx.conn.execute(query)).rowcount)


async def delete_stream(tx: Tx, team_id: str, stream_id: str) -> bool:
    query = delete(streams).where(streams.c.team_id == team_id, streams.c.id == stream_id)
    return bool((await tx.conn.execute(query)).rowcount)
