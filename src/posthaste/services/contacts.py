"""Contacts: a team's people, each with one unique address (case-insensitive), names,
``unsubscribed``, flat ``properties``; ``contact.created|updated|deleted`` recorded with each
change in its transaction (so webhooks and the live stream see them)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence

from posthaste.core.contacts import Contact, ContactChanges, NewContact, contact_ref_key
from posthaste.core.cursors import PageRequest
from posthaste.core.events import EventType
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.models import Event, Principal
from posthaste.core.serialize import contact_record
from posthaste.core.topics import TopicChoice
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.services.automation_runs import start_for_contacts
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import events as events_repo
from posthaste.storage import segments as segments_repo
from posthaste.storage import topics as topics_repo
from posthaste.storage.bulk import TableRows
from posthaste.storage.database import Database, Tx


async def existing_contact(
    tx: Tx, principal: Principal, ref: str, *, for_update: bool = False
) -> Contact:
    """The team's contact named by id or address; another team's is ``NotFound`` too."""
    key = contact_ref_key(ref)
    found = None
    if key is not None:
        found = await contacts_repo.get_contact(tx, principal.team_id, *key, for_update=for_update)
    if found is None:
        raise NotFound(f"Contact {ref!r} was not found.")
    return found


async def existing_segment_filter(tx: Tx, principal: Principal, segment_id: str) -> str:
    """A ``segment_id`` to list the members of: one of the team's segments."""
    if not is_uuid(segment_id) or not await segments_repo.get_segment(
        tx, principal.team_id, segment_id.lower()
    ):
        raise NotFound(f"Segment {segment_id!r} was not found.")
    return segment_id.lower()


async def check_topics(tx: Tx, team_id: str, choices: Collection[TopicChoice], field: str) -> None:
    """Every chosen topic is one of the team's (``ValidationError`` naming the first that isn't)."""
    wanted = [c.topic_id for c in choices]
    known = await topics_repo.existing_ids(tx, team_id, wanted)
    for topic_id in wanted:
        if topic_id not in known:
            raise ValidationError(f"{field!r} names {topic_id!r}, which is not one of your topics.")


async def check_segments(tx: Tx, team_id: str, segment_ids: Collection[str], field: str) -> None:
    """Every segment is one of the team's (``ValidationError`` naming the first that isn't),
    held until the transaction ends so that it cannot be deleted meanwhile."""
    known = await segments_repo.existing_ids(tx, team_id, segment_ids)
    for segment_id in segment_ids:
        if segment_id not in known:
            raise ValidationError(
                f"{field!r} names {segment_id!r}, which is not one of your segments."
            )


async def record_contact_events(
    tx: Tx,
    contacts: Collection[Contact],
    kind: EventType,
    now: int,
    also: Sequence[TableRows] = (),
) -> None:
    """One ``contact.*`` event per contact, carrying the contact as it is now; ``also``: rows
    to store with them (``events.insert_events``)."""
    events = [Event(new_id(), c.team_id, kind, None, now, contact_record(c)) for c in contacts]
    await events_repo.insert_events(tx, events, also)


async def contacts_created(
    tx: Tx, contacts: Collection[Contact], now: int, also: Sequence[TableRows] = ()
) -> None:
    """What follows the creation of contacts, in the transaction that stored them: every way
    a contact is created (``POST /contacts``, a part of an import, a custom event for a new
    address) comes through here: their ``contact.created`` events, and the runs of the
    automations that this trigger starts. ``also``: rows stored in the events' statement
    (an import's new contacts themselves, and their memberships)."""
    await record_contact_events(tx, contacts, EventType.CONTACT_CREATED, now, also)
    for team_id in sorted({contact.team_id for contact in contacts}):
        mine = [contact for contact in contacts if contact.team_id == team_id]
        await start_for_contacts(tx, team_id, mine, now)


def _taken(contact: Contact) -> Conflict:
    return Conflict(f"A contact with the address {contact.email!r} already exists.")


class ContactService:
    """Create, look up, edit, delete and list a team's contacts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, principal: Principal, new: NewContact) -> Contact:
        now = now_ms()
        contact = Contact(
            new_id(), principal.team_id, new.address.address, new.address.lookup_key,
            new.first_name, new.last_name, new.unsubscribed, dict(new.properties), now, now,
        )  # fmt: skip
        async with self.db.transaction() as tx:
            await check_segments(tx, principal.team_id, new.segment_ids, "segments")
            await check_topics(tx, principal.team_id, new.topics, "topics")
            if not await contacts_repo.insert_contact(tx, contact):
                raise _taken(contact)
            await segments_repo.add_members(tx, principal.team_id, contact.id, new.segment_ids, now)
            await topics_repo.set_choices(tx, principal.team_id, contact.id, new.topics, now)
            await contacts_created(tx, [contact], now)
        return contact

    async def get(self, principal: Principal, ref: str) -> Contact:
        async with self.db.read() as tx:
            return await existing_contact(tx, principal, ref)

    async def update(self, principal: Principal, ref: str, changes: ContactChanges) -> Contact:
        """Apply the changes; an edit that changes nothing records no event."""
        async with self.db.transaction() as tx:
            current = await existing_contact(tx, principal, ref, for_update=True)
            now = now_ms()
            changed = changes.applied_to(current, now)
            if changed == current:
                return current
            if not await contacts_repo.update_contact(tx, changed):
                raise _taken(changed)
            await record_contact_events(tx, [changed], EventType.CONTACT_UPDATED, now)
        return changed

    async def delete(self, principal: Principal, ref: str) -> Contact:
        """Remove the contact with its memberships and topic choices."""
        async with self.db.transaction() as tx:
            found = await existing_contact(tx, principal, ref, for_update=True)
            await contacts_repo.delete_contact(tx, principal.team_id, found.id)
            await record_contact_events(tx, [found], EventType.CONTACT_DELETED, now_ms())
        return found

    async def stream(self, principal: Principal, segment_id: str | None) -> AsyncIterator[Contact]:
        """Every contact of the team (of one of its segments), oldest first, in flat memory."""
        async with self.db.read() as tx:
            if segment_id is not None:
                segment_id = await existing_segment_filter(tx, principal, segment_id)
            async for contact in contacts_repo.stream_contacts(tx, principal.team_id, segment_id):
                yield contact

    async def page(
        self, principal: Principal, segment_id: str | None, request: PageRequest
    ) -> tuple[list[Contact], bool]:
        """Resend's paging (oldest first): the page and whether more lie beyond it."""
        async with self.db.read() as tx:
            if segment_id is not None:
                segment_id = await existing_segment_filter(tx, principal, segment_id)
            page = await contacts_repo.page_contacts(
                tx, principal.team_id, segment_id, request.limit, request.anchor,
                backwards=request.backwards,
            )  # fmt: skip
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your contacts.")
        return page
