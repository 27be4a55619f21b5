"""A team's event definitions: custom event names with the schema of their payloads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import delete, select, update

from posthaste.core.event_definitions import EventDefinition
from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import event_definitions

STREAM_ROWS = 500


def _definition(row: Any) -> EventDefinition:
    return EventDefinition(
        row.id, row.team_id, row.name, row.schema, row.created_at, row.updated_at
    )


async def insert_definition(tx: Tx, definition: EventDefinition) -> bool:
    """Insert; False when the team already defines an event with this name."""
    query = (
        insert_for(tx, event_definitions)
        .values(
            id=definition.id, team_id=definition.team_id, name=definition.name,
            schema=definition.schema, created_at=definition.created_at,
            updated_at=definition.updated_at,
        )
        .on_conflict_do_nothing()
    )  # fmt: skip
    return bool((await tx.conn.execute(query)).rowcount)


async def get_definition(
    tx: Tx, team_id: str, column: str, value: str, *, for_update: bool = False
) -> EventDefinition | None:
    """The team's definition whose ``id`` (``column`` "id") or ``name`` is ``value``;
    ``for_update`` locks it until the transaction ends."""
    key = event_definitions.c.id if column == "id" else event_definitions.c.name
    query = select(event_definitions).where(event_definitions.c.team_id == team_id, key == value)
    if for_update:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    return _definition(row) if row else None


async def update_schema(tx: Tx, definition: EventDefinition) -> None:
    query = (
        update(event_definitions)
        .where(
            event_definitions.c.team_id == definition.team_id,
            event_definitions.c.id == definition.id,
        )
        .values(schema=definition.schema, updated_at=definition.updated_at)
    )
    await tx.conn.execute(query)


async def delete_definition(tx: Tx, team_id: str, definition_id: str) -> None:
    query = delete(event_definitions).where(
        event_definitions.c.team_id == team_id, event_definitions.c.id == definition_id
    )
    await tx.conn.execute(query)


async def stream_definitions(tx: Tx, team_id: str) -> AsyncIterator[EventDefinition]:
    query = (
        select(event_definitions)
        .where(event_definitions.c.team_id == team_id)
        .order_by(event_definitions.c.created_at, event_definitions.c.id)
    )
    result = await tx.conn.stream(query.execution_options(yield_per=STREAM_ROWS))
    async for row in result:
        yield _definition(row)


async def page_definitions(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[EventDefinition], bool] | None:
    return await read_page(
        tx, event_definitions, select(event_definitions), _definition, team_id=team_id,
        limit=limit, anchor=anchor, newest_first=False, backwards=backwards,
    )  # fmt: skip
