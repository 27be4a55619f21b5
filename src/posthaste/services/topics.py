"""Topics: a team's subscription preferences (``opt_in`` or ``opt_out`` by default) and each
contact's choices; a contact's effective subscription is its choice, else the default."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from posthaste.core.cursors import PageRequest, page_of
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.models import Principal
from posthaste.core.template_fields import Unchanged
from posthaste.core.topics import (
    ContactTopic,
    NewTopic,
    Topic,
    TopicChanges,
    TopicChoice,
    effective_subscription,
)
from posthaste.errors import NotFound, ValidationError
from posthaste.services.contacts import check_topics, existing_contact
from posthaste.storage import topics as topics_repo
from posthaste.storage.database import Database, Tx


async def _existing(
    tx: Tx, principal: Principal, topic_id: str, *, for_update: bool = False
) -> Topic:
    found = None
    if is_uuid(topic_id):
        found = await topics_repo.get_topic(
            tx, principal.team_id, topic_id.lower(), for_update=for_update
        )
    if found is None:
        raise NotFound(f"Topic {topic_id!r} was not found.")
    return found


async def contact_topics_of(tx: Tx, team_id: str, contact_id: str) -> list[ContactTopic]:
    """Every topic of the team with the contact's effective subscription, oldest first."""
    chosen = await topics_repo.choices_of(tx, team_id, contact_id)
    return [
        ContactTopic(topic, effective_subscription(topic, chosen.get(topic.id)))
        for topic in await topics_repo.all_topics(tx, team_id)
    ]


class TopicService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, principal: Principal, new: NewTopic) -> Topic:
        now = now_ms()
        topic = Topic(
            new_id(), principal.team_id, new.name, new.description, new.default_subscription,
            now, now,
        )  # fmt: skip
        async with self.db.transaction() as tx:
            await topics_repo.insert_topic(tx, topic)
        return topic

    async def get(self, principal: Principal, topic_id: str) -> Topic:
        async with self.db.read() as tx:
            return await _existing(tx, principal, topic_id)

    async def update(self, principal: Principal, topic_id: str, changes: TopicChanges) -> Topic:
        async with self.db.transaction() as tx:
            current = await _existing(tx, principal, topic_id, for_update=True)
            name = current.name if isinstance(changes.name, Unchanged) else changes.name
            description = changes.description
            if isinstance(description, Unchanged):
                description = current.description
            if (name, description) == (current.name, current.description):
                return current
            updated = Topic(
                current.id, current.team_id, name, description, current.default_subscription,
                current.created_at, max(now_ms(), current.created_at),
            )  # fmt: skip
            await topics_repo.update_topic(tx, updated)
        return updated

    async def delete(self, principal: Principal, topic_id: str) -> Topic:
        """Remove the topic and every contact's choice for it."""
        async with self.db.transaction() as tx:
            found = await _existing(tx, principal, topic_id, for_update=True)
            await topics_repo.delete_topic(tx, principal.team_id, found.id)
        return found

    async def stream(self, principal: Principal) -> AsyncIterator[Topic]:
        async with self.db.read() as tx:
            async for topic in topics_repo.stream_topics(tx, principal.team_id):
                yield topic

    async def page(self, principal: Principal, request: PageRequest) -> tuple[list[Topic], bool]:
        async with self.db.read() as tx:
            page = await topics_repo.page_topics(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your topics.")
        return page

    async def of_contact(
        self, principal: Principal, contact_ref: str, request: PageRequest | None
    ) -> tuple[str, list[ContactTopic], bool]:
        """The contact's id and every topic of the team with the contact's effective
        subscription (a page of them when asked), oldest topic first."""
        async with self.db.read() as tx:
            contact = await existing_contact(tx, principal, contact_ref)
            items = await contact_topics_of(tx, principal.team_id, contact.id)
        if request is None:
            return contact.id, items, False
        page, more = page_of(items, request, lambda t: t.topic.id, "topics")
        return contact.id, page, more

    async def choose(
        self, principal: Principal, contact_ref: str, choices: Sequence[TopicChoice]
    ) -> tuple[str, list[ContactTopic]]:
        """Record the contact's choices (other topics keep theirs); its topics after them."""
        async with self.db.transaction() as tx:
            contact = await existing_contact(tx, principal, contact_ref, for_update=True)
            await check_topics(tx, principal.team_id, choices, "topics")
            await topics_repo.set_choices(tx, principal.team_id, contact.id, choices, now_ms())
            return contact.id, await contact_topics_of(tx, principal.team_id, contact.id)
