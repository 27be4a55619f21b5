"""Segments: named lists of a team's contacts, managed by adding and removing contacts.
Deleting a segment leaves its contacts as they are; adding a member twice changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

from posthaste.core.cursors import PageRequest, page_of
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.models import Principal
from posthaste.core.segments import Segment
from posthaste.errors import NotFound, ValidationError
from posthaste.services.contacts import existing_contact
from posthaste.storage import segments as segments_repo
from posthaste.storage.database import Database, Tx


async def _existing(
    tx: Tx, principal: Principal, segment_id: str, *, hold: bool = False
) -> Segment:
    found = None
    if is_uuid(segment_id):
        found = await segments_repo.get_segment(
            tx, principal.team_id, segment_id.lower(), hold=hold
        )
    if found is None:
        raise NotFound(f"Segment {segment_id!r} was not found.")
    return found


class SegmentService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, principal: Principal, name: str) -> Segment:
        segment = Segment(new_id(), principal.team_id, name, now_ms())
        async with self.db.transaction() as tx:
            await segments_repo.insert_segment(tx, segment)
        return segment

    async def get(self, principal: Principal, segment_id: str) -> Segment:
        async with self.db.read() as tx:
            return await _existing(tx, principal, segment_id)

    async def rename(self, principal: Principal, segment_id: str, name: str) -> Segment:
        async with self.db.transaction() as tx:
            found = await _existing(tx, principal, segment_id)
            await segments_repo.rename_segment(tx, principal.team_id, found.id, name)
        return Segment(found.id, found.team_id, name, found.created_at)

    async def delete(self, principal: Principal, segment_id: str) -> Segment:
        async with self.db.transaction() as tx:
            found = await _existing(tx, principal, segment_id)
            await segments_repo.delete_segment(tx, principal.team_id, found.id)
        return found

    async def stream(self, principal: Principal) -> AsyncIterator[Segment]:
        async with self.db.read() as tx:
            async for segment in segments_repo.stream_segments(tx, principal.team_id):
                yield segment

    async def page(self, principal: Principal, request: PageRequest) -> tuple[list[Segment], bool]:
        async with self.db.read() as tx:
            page = await segments_repo.page_segments(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your segments.")
        return page

    async def add_contact(self, principal: Principal, contact_ref: str, segment_id: str) -> Segment:
        """Put the contact in the segment; a contact already in it stays (same answer)."""
        async with self.db.transaction() as tx:
            contact = await existing_contact(tx, principal, contact_ref, for_update=True)
            segment = await _existing(tx, principal, segment_id, hold=True)
            await segments_repo.add_members(
                tx, principal.team_id, contact.id, [segment.id], now_ms()
            )
        return segment

    async def remove_contact(
        self, principal: Principal, contact_ref: str, segment_id: str
    ) -> Segment:
        """Take the contact out of the segment; one not in it is answered the same way."""
        async with self.db.transaction() as tx:
            contact = await existing_contact(tx, principal, contact_ref)
            segment = await _existing(tx, principal, segment_id)
            await segments_repo.remove_member(tx, principal.team_id, contact.id, segment.id)
        return segment

    async def of_contact(
        self, principal: Principal, contact_ref: str, request: PageRequest | None
    ) -> tuple[list[Segment], bool]:
        """The segments the contact is in (a page of them when asked), oldest first."""
        async with self.db.read() as tx:
            contact = await existing_contact(tx, principal, contact_ref)
            found = await segments_repo.segments_of(tx, principal.team_id, contact.id)
        if request is None:
            return found, False
        return page_of(found, request, lambda s: s.id, "contact's segments")
