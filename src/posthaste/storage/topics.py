"""A team's topics and its contacts' own choices (a row only where a contact chose)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

from sqlalchemy import delete, select, update

from posthaste.core.topics import Topic, TopicChoice
from posthaste.storage.database import Tx
from posthaste.storage.dialects import among, insert_for
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import contact_topics, topics


def _topic(row: Any) -> Topic:
    return Topic(
        row.id, row.team_id, row.name, row.description, row.default_subscription,
        row.created_at, row.updated_at,
    )  # fmt: skip


async def insert_topic(tx: Tx, topic: Topic) -> None:
    await tx.conn.execute(
        topics.insert().values(
            id=topic.id, team_id=topic.team_id, name=topic.name, description=topic.description,
            default_subscription=topic.default_subscription, created_at=topic.created_at,
            updated_at=topic.updated_at,
        )
    )  # fmt: skip


async def get_topic(
    tx: Tx, team_id: str, topic_id: str, *, for_update: bool = False
) -> Topic | None:
    query = select(topics).where(topics.c.team_id == team_id, topics.c.id == topic_id)
    if for_update:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    return _topic(row) if row else None


async def existing_ids(tx: Tx, team_id: str, topic_ids: Collection[str]) -> set[str]:
    """Which of ``topic_ids`` are the team's topics; they are kept from being deleted until
    the transaction ends (PostgreSQL ``FOR KEY SHARE``), so choices for them can be stored."""
    if not topic_ids:
        return set()
    query = (
        select(topics.c.id)
        .where(topics.c.team_id == team_id, among(tx, topics.c.id, list(topic_ids)))
        .with_for_update(read=True, key_share=True)
    )
    return {row.id for row in await tx.conn.execute(query)}


async def update_topic(tx: Tx, topic: Topic) -> None:
    query = (
        update(topics)
        .where(topics.c.team_id == topic.team_id, topics.c.id == topic.id)
        .values(name=topic.name, description=topic.description, updated_at=topic.updated_at)
    )
    await tx.conn.execute(query)


async def delete_topic(tx: Tx, team_id: str, topic_id: str) -> bool:
    """Remove the topic and every contact's choice for it (cascade)."""
    query = delete(topics).where(topics.c.team_id == team_id, topics.c.id == topic_id)
    return bool((await tx.conn.execute(query)).rowcount)


async def all_topics(tx: Tx, team_id: str) -> list[Topic]:
    """Every topic of the team, oldest first (a team has few: a contact's list holds them all)."""
    query = (
        select(topics).where(topics.c.team_id == team_id).order_by(topics.c.created_at, topics.c.id)
    )
    return [_topic(row) for row in await tx.conn.execute(query)]


async def stream_topics(tx: Tx, team_id: str) -> AsyncIterator[Topic]:
    query = (
        select(topics).where(topics.c.team_id == team_id).order_by(topics.c.created_at, topics.c.id)
    )
    result = await tx.conn.stream(query.execution_options(yield_per=500))
    async for row in result:
        yield _topic(row)


async def page_topics(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[Topic], bool] | None:
    return await read_page(
        tx,
        topics,
        select(topics),
        _topic,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=False,
        backwards=backwards,
    )


async def choices_of(tx: Tx, team_id: str, contact_id: str) -> dict[str, str]:
    """The contact's own choices: topic id → ``opt_in`` or ``opt_out``."""
    query = select(contact_topics.c.topic_id, contact_topics.c.subscription).where(
        contact_topics.c.team_id == team_id, contact_topics.c.contact_id == contact_id
    )
    return {row.topic_id: row.subscription for row in await tx.conn.execute(query)}


async def set_choices(
    tx: Tx, team_id: str, contact_id: str, choices: Sequence[TopicChoice], now: int
) -> None:
    """Record the contact's choices, replacing an earlier choice for the same topic."""
    if not choices:
        return
    rows = [
        {
            "contact_id": contact_id,
            "topic_id": c.topic_id,
            "team_id": team_id,
            "subscription": c.subscription,
            "updated_at": now,
        }
        for c in choices
    ]
    query = insert_for(tx, contact_topics).values(rows)
    await tx.conn.execute(
        query.on_conflict_do_update(
            index_elements=["contact_id", "topic_id"],
            set_={
                "subscription": query.excluded.subscription,
                "updated_at": query.excluded.updated_at,
            },
        )
    )
