"""Unsubscribing by a signed link or address (no key): one click (RFC 8058), mail to the
``mailto:`` address (RFC 2369, through the inbound server), or the contact's own topic choices
from the unsubscribe page.

A token names a broadcast's contact, or a one-recipient email sent on a broadcast stream
(``core.unsubscribe``): then it stands for the team's contact with that email's address, made
when the person first unsubscribes or chooses topics (``contact.created``, unsubscribed from
the start). A token that is not genuine is ``NotFound`` and changes nothing; unsubscribing twice
answers the same and records one event.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from posthaste.core.addresses import parse_address
from posthaste.core.contacts import Contact
from posthaste.core.events import EventType
from posthaste.core.ids import new_id, now_ms
from posthaste.core.topics import ContactTopic, TopicChoice, effective_subscription
from posthaste.core.unsubscribe import TokenKind, UnsubscribeLinks, UnsubscribeToken, read_token
from posthaste.errors import NotFound, ValidationError
from posthaste.services.contacts import contacts_created, record_contact_events
from posthaste.services.topics import contact_topics_of
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import domains as domains_repo
from posthaste.storage import emails as emails_repo
from posthaste.storage import topics as topics_repo
from posthaste.storage.database import Database, Tx


@dataclass(frozen=True)
class Preferences:
    """What the unsubscribe page shows: the address, whether it is unsubscribed, and its
    effective topic subscriptions."""

    email: str
    unsubscribed: bool
    topics: list[ContactTopic]


@dataclass(frozen=True)
class _Subscriber:
    """Whom a genuine token names: a team's address, and its contact if there is one yet."""

    team_id: str
    email: str  # as a contact stores it (ASCII domain)
    email_key: str  # its lookup form
    contact: Contact | None
    from_domain: str | None = None  # an email's sending domain (A-label, lower case)


class UnsubscribeService:
    def __init__(self, db: Database, links: UnsubscribeLinks) -> None:
        self.db = db
        self.links = links

    async def preferences(self, token: str) -> Preferences:
        async with self.db.read() as tx:
            subscriber = await self._subscriber(tx, token)
            return await _preferences(tx, subscriber)

    async def unsubscribe(self, token: str) -> Preferences:
        """Mark the contact ``unsubscribed`` (made so when the token's address has none): no
        broadcast, and no mail on a broadcast stream, reaches it again."""
        async with self.db.transaction() as tx:
            subscriber = await self._subscriber(tx, token, for_update=True)
            contact = subscriber.contact
            now = now_ms()
            if contact is None:
                contact = await _created(tx, subscriber, now, unsubscribed=True)
            elif not contact.unsubscribed:
                now = max(now, contact.updated_at)
                contact = replace(contact, unsubscribed=True, updated_at=now)
                await contacts_repo.update_contact(tx, contact)
                await record_contact_events(tx, [contact], EventType.CONTACT_UPDATED, now)
            return await _preferences(tx, replace(subscriber, contact=contact))

    async def choose_topics(self, token: str, opted_in: Collection[str]) -> Preferences:
        """The page's topic form: the team's topics in ``opted_in`` are chosen, the others
        refused (ids that are not the team's topics are ignored)."""
        async with self.db.transaction() as tx:
            subscriber = await self._subscriber(tx, token, for_update=True)
            now = now_ms()
            contact = subscriber.contact or await _created(tx, subscriber, now, unsubscribed=False)
            team_topics = await topics_repo.all_topics(tx, contact.team_id)
            choices = [
                TopicChoice(t.id, "opt_in" if t.id in opted_in else "opt_out") for t in team_topics
            ]
            await topics_repo.set_choices(tx, contact.team_id, contact.id, choices, now)
            return await _preferences(tx, replace(subscriber, contact=contact))

    async def mailbox_team(self, token: str, domain: str) -> str | None:
        """For the inbound server's RCPT: the team whose unsubscribe address
        ``unsubscribe+<token>@send.<domain>`` is, or None (a forged token, a contact or email
        gone, or a domain that is not where the token was sent from)."""
        async with self.db.read() as tx:
            try:
                subscriber = await self._subscriber(tx, token)
            except NotFound:
                return None
            if subscriber.from_domain is not None:
                ours = subscriber.from_domain == domain
            else:  # a broadcast's contact: any of its team's domains
                ours = await domains_repo.find_by_name(tx, subscriber.team_id, domain) is not None
        return subscriber.team_id if ours else None

    async def _subscriber(self, tx: Tx, token: str, *, for_update: bool = False) -> _Subscriber:
        read = read_token(token)
        found = None
        if read is not None:
            if read.kind is TokenKind.CONTACT:
                found = await self._contact_named(tx, read, for_update)
            else:
                found = await self._email_recipient(tx, read, for_update)
        if found is None:
            raise NotFound("This unsubscribe link is not valid.")
        return found

    async def _contact_named(
        self, tx: Tx, read: UnsubscribeToken, for_update: bool
    ) -> _Subscriber | None:
        contact = await contacts_repo.get_contact_any_team(
            tx, read.subject_id, for_update=for_update
        )
        if contact is None or not self.links.genuine(read, contact.team_id):
            return None
        return _Subscriber(contact.team_id, contact.email, contact.email_key, contact)

    async def _email_recipient(
        self, tx: Tx, read: UnsubscribeToken, for_update: bool
    ) -> _Subscriber | None:
        """The one recipient of the email the token names, and the team's contact for it."""
        email = (await emails_repo.get_emails_any_team(tx, [read.subject_id])).get(read.subject_id)
        if email is None or not self.links.genuine(read, email.team_id):
            return None
        recipients = [*email.to, *email.cc, *email.bcc]
        if len(recipients) != 1:  # never made for such an email
            return None
        try:
            address = parse_address(recipients[0], "to")
            from_domain = parse_address(email.from_address, "from").domain.lower()
        except ValidationError:
            return None
        contact = await contacts_repo.get_contact(
            tx, email.team_id, "email", address.lookup_key, for_update=for_update
        )
        return _Subscriber(email.team_id, address.address, address.lookup_key, contact, from_domain)


async def _created(tx: Tx, subscriber: _Subscriber, now: int, *, unsubscribed: bool) -> Contact:
    """The team's contact for the subscriber's address, made now (``contact.created``, and the
    automations that trigger on it); when a concurrent request made it first, that one."""
    contact = Contact(
        new_id(), subscriber.team_id, subscriber.email, subscriber.email_key, None, None,
        unsubscribed, {}, now, now,
    )  # fmt: skip
    if await contacts_repo.insert_contact(tx, contact):
        await contacts_created(tx, [contact], now)
        return contact
    existing = await contacts_repo.get_contact(
        tx, subscriber.team_id, "email", subscriber.email_key, for_update=True
    )
    assert existing is not None  # the insert met it
    if unsubscribed and not existing.unsubscribed:
        existing = replace(existing, unsubscribed=True, updated_at=max(now, existing.updated_at))
        await contacts_repo.update_contact(tx, existing)
        await record_contact_events(tx, [existing], EventType.CONTACT_UPDATED, now)
    return existing


async def _preferences(tx: Tx, subscriber: _Subscriber) -> Preferences:
    contact = subscriber.contact
    if contact is not None:
        topics = await contact_topics_of(tx, contact.team_id, contact.id)
        return Preferences(contact.email, contact.unsubscribed, topics)
    team_topics = await topics_repo.all_topics(tx, subscriber.team_id)
    defaults = [ContactTopic(t, effective_subscription(t, None)) for t in team_topics]
    return Preferences(subscriber.email, False, defaults)
