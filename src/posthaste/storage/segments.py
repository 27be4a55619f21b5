"""A team's segments and their members (a member row per contact in a segment)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any

from sqlalchemy import delete, select, update

from posthaste.core.segments import Segment
from posthaste.storage import bulk
from posthaste.storage.database import Tx
from posthaste.storage.dialects import among, insert_for
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import segment_members, segments


def _segment(row: Any) -> Segment:
    return Segment(row.id, row.team_id, row.name, row.created_at)


async def insert_segment(tx: Tx, segment: Segment) -> None:
    await tx.conn.execute(
        segments.insert().values(
            id=segment.id, team_id=segment.team_id, name=segment.name,
            created_at=segment.created_at,
        )
    )  # fmt: skip


async def get_segment(
    tx: Tx, team_id: str, segment_id: str, *, hold: bool = False
) -> Segment | None:
    """The team's segment; ``hold`` keeps it from being deleted until the transaction ends
    (PostgreSQL ``FOR KEY SHARE``: members can be added to it meanwhile, by others too)."""
    query = select(segments).where(segments.c.team_id == team_id, segments.c.id == segment_id)
    if hold:
        query = query.with_for_update(read=True, key_share=True)
    row = (await tx.conn.execute(query)).first()
    return _segment(row) if row else None


async def existing_ids(tx: Tx, team_id: str, segment_ids: Collection[str]) -> set[str]:
    """Which of ``segment_ids`` are the team's segments, held as ``get_segment`` does."""
    if not segment_ids:
        return set()
    query = (
        select(segments.c.id)
        .where(segments.c.team_id == team_id, among(tx, segments.c.id, list(segment_ids)))
        .with_for_update(read=True, key_share=True)
    )
    return {row.id for row in await tx.conn.execute(query)}


async def rename_segment(tx: Tx, team_id: str, segment_id: str, name: str) -> bool:
    query = (
        update(segments)
        .where(segments.c.team_id == team_id, segments.c.id == segment_id)
        .values(name=name)
    )
    return bool((await tx.conn.execute(query)).rowcount)


async def delete_segment(tx: Tx, team_id: str, segment_id: str) -> bool:
    """Remove the segment and its member rows (cascade); the contacts stay."""
    query = delete(segments).where(segments.c.team_id == team_id, segments.c.id == segment_id)
    return bool((await tx.conn.execute(query)).rowcount)


async def stream_segments(tx: Tx, team_id: str) -> AsyncIterator[Segment]:
    """Every segment of the team, oldest first, in flat memory."""
    query = (
        select(segments)
        .where(segments.c.team_id == team_id)
        .order_by(segments.c.created_at, segments.c.id)
    )
    result = await tx.conn.stream(query.execution_options(yield_per=500))
    async for row in result:
        yield _segment(row)


async def page_segments(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[Segment], bool] | None:
    return await read_page(
        tx,
        segments,
        select(segments),
        _segment,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=False,
        backwards=backwards,
    )


async def add_members(
    tx: Tx, team_id: str, contact_id: str, segment_ids: Collection[str], now: int
) -> None:
    """Put the contact in each segment; a membership that exists stays as it is."""
    if not segment_ids:
        return
    rows = [
        {"segment_id": s, "contact_id": contact_id, "team_id": team_id, "created_at": now}
        for s in segment_ids
    ]
    await tx.conn.execute(insert_for(tx, segment_members).values(rows).on_conflict_do_nothing())


async def add_memberships(
    tx: Tx, team_id: str, segment_ids: Collection[str], contact_ids: Collection[str], now: int
) -> None:
    """Put every contact in every segment; memberships that exist stay as they are."""
    await bulk.insert_new_rows(tx, *new_memberships(team_id, segment_ids, contact_ids, now))


def new_memberships(
    team_id: str, segment_ids: Collection[str], contact_ids: Collection[str], now: int
) -> bulk.TableRows:
    """Every contact in every segment, as rows to insert (contacts that are new, so none of
    them is a member yet): for ``events.insert_events``' ``also``."""
    rows = [
        {"segment_id": s, "contact_id": c, "team_id": team_id, "created_at": now}
        for s in segment_ids
        for c in contact_ids
    ]
    return segment_members, rows


async def remove_member(tx: Tx, team_id: str, contact_id: str, segment_id: str) -> bool:
    query = delete(segment_members).where(
        segment_members.c.team_id == team_id,
        segment_members.c.segment_id == segment_id,
        segment_members.c.contact_id == contact_id,
    )
    return bool((await tx.conn.execute(query)).rowcount)


async def segments_of(tx: Tx, team_id: str, contact_id: str) -> list[Segment]:
    """The segments the contact is in, oldest segment first."""
    query = (
        select(segments)
        .join(segment_members, segment_members.c.segment_id == segments.c.id)
        .where(segment_members.c.team_id == team_id, segment_members.c.contact_id == contact_id)
        .order_by(segments.c.created_at, segments.c.id)
    )
    return [_segment(row) for row in await tx.conn.execute(query)]
