"""A team's contact imports, their progress, and the stored parts of their CSV."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import delete, select, update

from posthaste.core.contact_imports import (
    ContactImport,
    ImportStatus,
    LineError,
    OnConflict,
)
from posthaste.storage.database import Tx
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import contact_import_parts, contact_imports

STREAM_ROWS = 500


def _import(row: Any) -> ContactImport:
    return ContactImport(
        id=row.id,
        team_id=row.team_id,
        status=ImportStatus(row.status),
        on_conflict=OnConflict(row.on_conflict),
        segment_ids=tuple(row.segment_ids),
        header=tuple(row.header),
        parts=row.parts,
        next_part=row.next_part,
        total=row.total,
        created_at=row.created_at,
        created=row.created,
        updated=row.updated,
        skipped=row.skipped,
        failed=row.failed,
        errors=tuple(LineError(e["line"], e["message"]) for e in row.errors),
        completed_at=row.completed_at,
    )


def _progress(item: ContactImport) -> dict[str, Any]:
    return {
        "status": item.status.value,
        "next_part": item.next_part,
        "created": item.created,
        "updated": item.updated,
        "skipped": item.skipped,
        "failed": item.failed,
        "errors": [{"line": e.line, "message": e.message} for e in item.errors],
        "completed_at": item.completed_at,
    }


async def insert_import(tx: Tx, item: ContactImport) -> None:
    values = {
        "id": item.id,
        "team_id": item.team_id,
        "on_conflict": item.on_conflict.value,
        "segment_ids": list(item.segment_ids),
        "header": list(item.header),
        "parts": item.parts,
        "total": item.total,
        "created_at": item.created_at,
        **_progress(item),
    }
    await tx.conn.execute(contact_imports.insert().values(values))


async def insert_part(tx: Tx, import_id: str, seq: int, first_line: int, data: bytes) -> None:
    """Store part ``seq`` of the import's CSV, whose first line is ``first_line``."""
    await tx.conn.execute(
        contact_import_parts.insert().values(
            import_id=import_id, seq=seq, first_line=first_line, data=data
        )
    )


async def get_import(tx: Tx, team_id: str, import_id: str) -> ContactImport | None:
    query = select(contact_imports).where(
        contact_imports.c.team_id == team_id, contact_imports.c.id == import_id
    )
    row = (await tx.conn.execute(query)).first()
    return _import(row) if row else None


async def get_import_to_run(
    tx: Tx, import_id: str, *, for_update: bool = False
) -> ContactImport | None:
    """The import a job names (the job carries its team); ``for_update`` locks the row so
    that one transaction at a time moves its progress (PostgreSQL)."""
    query = select(contact_imports).where(contact_imports.c.id == import_id)
    if for_update:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    return _import(row) if row else None


async def read_part(tx: Tx, import_id: str, seq: int) -> tuple[int, bytes] | None:
    """Part ``seq`` of the import's CSV: its first line's number and its bytes."""
    query = select(contact_import_parts.c.first_line, contact_import_parts.c.data).where(
        contact_import_parts.c.import_id == import_id, contact_import_parts.c.seq == seq
    )
    row = (await tx.conn.execute(query)).first()
    return (row.first_line, bytes(row.data)) if row else None


async def save_progress(tx: Tx, item: ContactImport) -> None:
    """Write the import's status, counts, errors and next part."""
    query = (
        update(contact_imports)
        .where(contact_imports.c.team_id == item.team_id, contact_imports.c.id == item.id)
        .values(_progress(item))
    )
    await tx.conn.execute(query)


async def delete_parts(tx: Tx, import_id: str) -> None:
    """Drop the import's CSV (once it has finished)."""
    await tx.conn.execute(
        delete(contact_import_parts).where(contact_import_parts.c.import_id == import_id)
    )


async def stream_imports(tx: Tx, team_id: str) -> AsyncIterator[ContactImport]:
    """Every import of the team, newest first, in flat memory."""
    query = (
        select(contact_imports)
        .where(contact_imports.c.team_id == team_id)
        .order_by(contact_imports.c.created_at.desc(), contact_imports.c.id.desc())
    )
    result = await tx.conn.stream(query.execution_options(yield_per=STREAM_ROWS))
    async for row in result:
        yield _import(row)


async def page_imports(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[ContactImport], bool] | None:
    """A page of the team's imports, newest first, after (before) the import ``anchor``."""
    return await read_page(
        tx,
        contact_imports,
        select(contact_imports),
        _import,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=True,
        backwards=backwards,
    )
