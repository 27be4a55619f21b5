"""Unsubscribing by a signed link (no key): one click (RFC 8058), or the contact's own topic
choices from the unsubscribe page. A token that is not genuine is ``NotFound`` and changes
nothing; unsubscribing twice answers the same and records one ``contact.updated``."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from posthaste.core.contacts import Contact
from posthaste.core.events import EventType
from posthaste.core.ids import now_ms
from posthaste.core.topics import ContactTopic, TopicChoice
from posthaste.core.unsubscribe import UnsubscribeLinks, read_token
from posthaste.errors import NotFound
from posthaste.services.contacts import record_contact_events
from posthaste.services.topics import contact_topics_of
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import topics as topics_repo
from posthaste.storage.database import Database, Tx


@dataclass(frozen=True)
class Preferences:
    """What the unsubscribe page shows: the contact and its effective topic subscriptions."""

    contact: Contact
    topics: list[ContactTopic]


class UnsubscribeService:
    def __init__(self, db: Database, links: UnsubscribeLinks) -> None:
        self.db = db
        self.links = links

    async def preferences(self, token: str) -> Preferences:
        async with self.db.read() as tx:
            contact = await self._contact(tx, token)
            return Preferences(contact, await contact_topics_of(tx, contact.team_id, contact.id))

    async def unsubscribe(self, token: str) -> Preferences:
        """Mark the contact ``unsubscribed`` (no broadcast mails it again)."""
        async with self.db.transaction() as tx:
            contact = await self._contact(tx, token, for_update=True)
            if not contact.unsubscribed:
                now = max(now_ms(), contact.updated_at)
                contact = replace(contact, unsubscribed=True, updated_at=now)
                await contacts_repo.update_contact(tx, contact)
                await record_contact_events(tx, [contact], EventType.CONTACT_UPDATED, now)
            return Preferences(contact, await contact_topics_of(tx, contact.team_id, contact.id))

    async def choose_topics(self, token: str, opted_in: Collection[str]) -> Preferences:
        """The page's topic form: the team's topics in ``opted_in`` are chosen, the others
        refused (ids that are not the team's topics are ignored)."""
        async with self.db.transaction() as tx:
            contact = await self._contact(tx, token, for_update=True)
            team_topics = await topics_repo.all_topics(tx, contact.team_id)
            choices = [
                TopicChoice(t.id, "opt_in" if t.id in opted_in else "opt_out") for t in team_topics
            ]
            await topics_repo.set_choices(tx, contact.team_id, contact.id, choices, now_ms())
            return Preferences(contact, await contact_topics_of(tx, contact.team_id, contact.id))

    async def _contact(self, tx: Tx, token: str, *, for_update: bool = False) -> Contact:
        read = read_token(token)
        contact = None
        if read is not None:
            contact = await contacts_repo.get_contact_any_team(
                tx, read.contact_id, for_update=for_update
            )
        if read is None or contact is None or not self.links.genuine(read, contact.team_id):
            raise NotFound("This unsubscribe link is not valid.")
        return contact
