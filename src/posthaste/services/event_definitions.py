"""Event definitions (Resend's ``/events``): a team's custom event names declared with an
optional schema, created, read by id or name, listed, given a new schema and deleted; and the
check ``POST /events/send`` makes of a payload against its event's schema."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from posthaste.core.cursors import PageRequest
from posthaste.core.event_definitions import (
    EventDefinition,
    NewEventDefinition,
    Schema,
    check_payload,
)
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.models import Principal
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.storage import event_definitions as repo
from posthaste.storage.database import Database, Tx


async def _existing(
    tx: Tx, principal: Principal, ref: str, *, for_update: bool = False
) -> EventDefinition:
    """The team's definition whose id or name is ``ref`` (an id first: a name may look like one)."""
    found = None
    if is_uuid(ref):
        found = await repo.get_definition(
            tx, principal.team_id, "id", ref.lower(), for_update=for_update
        )
    if found is None:
        found = await repo.get_definition(tx, principal.team_id, "name", ref, for_update=for_update)
    if found is None:
        raise NotFound(f"Event {ref!r} was not found; give the id or the name of a defined event.")
    return found


async def check_event_payload(tx: Tx, team_id: str, name: str, payload: Mapping[str, Any]) -> None:
    """Refuse (422) a payload its event's schema contradicts; an event that is not defined, or
    defined without a schema, takes any payload."""
    definition = await repo.get_definition(tx, team_id, "name", name)
    if definition is not None:
        check_payload(definition, payload)


class EventDefinitionService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, principal: Principal, new: NewEventDefinition) -> EventDefinition:
        now = now_ms()
        definition = EventDefinition(new_id(), principal.team_id, new.name, new.schema, now, now)
        async with self.db.transaction() as tx:
            if not await repo.insert_definition(tx, definition):
                raise Conflict(
                    f"An event named {new.name!r} is already defined; change its schema with "
                    f"PATCH /events/{new.name}."
                )
        return definition

    async def get(self, principal: Principal, ref: str) -> EventDefinition:
        async with self.db.read() as tx:
            return await _existing(tx, principal, ref)

    async def update(
        self, principal: Principal, ref: str, schema: Schema | None
    ) -> EventDefinition:
        """Replace the definition's schema (``None`` clears it)."""
        async with self.db.transaction() as tx:
            current = await _existing(tx, principal, ref, for_update=True)
            changed = replace(current, schema=schema, updated_at=max(now_ms(), current.created_at))
            await repo.update_schema(tx, changed)
        return changed

    async def delete(self, principal: Principal, ref: str) -> EventDefinition:
        """Remove the definition; the event can still be sent, with any payload."""
        async with self.db.transaction() as tx:
            found = await _existing(tx, principal, ref, for_update=True)
            await repo.delete_definition(tx, principal.team_id, found.id)
        return found

    async def stream(self, principal: Principal) -> AsyncIterator[EventDefinition]:
        async with self.db.read() as tx:
            async for definition in repo.stream_definitions(tx, principal.team_id):
                yield definition

    async def page(
        self, principal: Principal, request: PageRequest
    ) -> tuple[list[EventDefinition], bool]:
        async with self.db.read() as tx:
            page = await repo.page_definitions(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your events.")
        return page
