"""A team's contacts, looked up by id or by their lower-cased address (``email_key``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Select,
    bindparam,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from posthaste.core.contacts import Contact
from posthaste.storage import bulk
from posthaste.storage.database import Tx
from posthaste.storage.dialects import Forms, insert_for
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import contacts, segment_members

STREAM_ROWS = 500


def contact_of(row: Any) -> Contact:
    return Contact(
        id=row.id,
        team_id=row.team_id,
        email=row.email,
        email_key=row.email_key,
        first_name=row.first_name,
        last_name=row.last_name,
        unsubscribed=bool(row.unsubscribed),
        properties=dict(row.properties or {}),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _values(contact: Contact) -> dict[str, Any]:
    return {
        "email": contact.email,
        "email_key": contact.email_key,
        "first_name": contact.first_name,
        "last_name": contact.last_name,
        "unsubscribed": contact.unsubscribed,
        "properties": contact.properties,
        "updated_at": contact.updated_at,
    }


async def insert_contact(tx: Tx, contact: Contact) -> bool:
    """Insert; False when the team already has a contact with this address."""
    query = (
        insert_for(tx, contacts)
        .values(id=contact.id, team_id=contact.team_id, created_at=contact.created_at,
                **_values(contact))
        .on_conflict_do_nothing()
    )  # fmt: skip
    return bool((await tx.conn.execute(query)).rowcount)


async def contacts_by_keys(tx: Tx, team_id: str, keys: Collection[str]) -> list[Contact]:
    """The team's contacts whose lookup addresses are among ``keys``, locked (PostgreSQL) so
    that the caller's writes to them apply in turn with other edits."""
    if not keys:
        return []
    query = (
        select(contacts)
        .where(contacts.c.team_id == team_id, tx.dialect.pick(_AMONG_KEYS)(list(keys)))
        .with_for_update()
    )
    return [contact_of(row) for row in await tx.conn.execute(query)]


async def unsubscribed_among(tx: Tx, team_id: str, keys: Collection[str]) -> set[str]:
    """Which of the lookup addresses ``keys`` are the team's unsubscribed contacts (one
    statement; the unique index on the address finds each)."""
    if not keys:
        return set()
    query = select(contacts.c.email_key).where(
        contacts.c.team_id == team_id,
        contacts.c.unsubscribed.is_(True),
        tx.dialect.pick(_AMONG_KEYS)(list(keys)),
    )
    return {row.email_key for row in await tx.conn.execute(query)}


def _among_keys_postgres(keys: list[str]) -> ColumnElement[bool]:
    # ``IN (SELECT unnest(:keys))``, not ``= ANY(:keys)``: while a big import fills the table,
    # its statistics lag, and a generic plan of ``= ANY`` filtered every contact of the team
    # against the whole array (a part of 1,000 took seconds at 30,000 contacts); this form
    # is a semi-join (hashed keys, or the unique index per key) whatever the estimates say.
    array = bindparam("email_keys", keys, type_=ARRAY(contacts.c.email_key.type))
    return contacts.c.email_key.in_(select(func.unnest(array)))


def _among_keys_sqlite(keys: list[str]) -> ColumnElement[bool]:
    return contacts.c.email_key.in_(keys)


_AMONG_KEYS = Forms(postgresql=_among_keys_postgres, sqlite=_among_keys_sqlite)


class AddressTaken(Exception):
    """A contact to insert has an address the team already has (another request created it
    meanwhile); the transaction is to be rolled back."""


def inserted(items: Sequence[Contact]) -> bulk.TableRows:
    """New contacts as rows to store with their events (``events.insert_events``' ``also``);
    run that inside ``new_addresses()``."""
    rows = [
        {"id": c.id, "team_id": c.team_id, "created_at": c.created_at, **_values(c)} for c in items
    ]
    return contacts, rows


@contextlib.asynccontextmanager
async def new_addresses() -> AsyncIterator[None]:
    """Around the statement that stores ``inserted`` contacts: ``AddressTaken`` when the team
    already has one of their addresses. No savepoint (on PostgreSQL it costs two more round
    trips): the caller rolls the whole transaction back and redoes it."""
    try:
        yield
    except IntegrityError as exc:
        raise AddressTaken from exc


async def update_contacts(tx: Tx, items: Sequence[Contact]) -> None:
    """Write every field of each contact, in one statement."""
    rows = [{"team_id": c.team_id, "id": c.id, **_values(c)} for c in items]
    await bulk.update_rows(tx, contacts, ["team_id", "id"], rows)


async def get_contact(
    tx: Tx, team_id: str, kind: str, value: str, *, for_update: bool = False
) -> Contact | None:
    """The team's contact whose ``id`` (``kind`` "id") or lookup address ("email") is
    ``value``; ``for_update`` locks its row (PostgreSQL) so concurrent edits apply in turn."""
    column = contacts.c.id if kind == "id" else contacts.c.email_key
    query = select(contacts).where(contacts.c.team_id == team_id, column == value)
    if for_update:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    return contact_of(row) if row else None


async def get_contacts(tx: Tx, keys: Collection[tuple[str, str]]) -> dict[str, Contact]:
    """The contacts of several ``(team_id, contact_id)`` in one statement, by id (the deleted
    ones left out). Looked up by id alone, the team checked on the rows: with the team in the
    query, PostgreSQL read every contact of the team through its team index while the table's
    statistics were missing (just after an import, 22 ms instead of 0.06 ms for 8 contacts)."""
    wanted = set(keys)
    if not wanted:
        return {}
    query = select(contacts).where(contacts.c.id.in_(sorted({c for _, c in wanted})))
    rows = await tx.conn.execute(query)
    return {row.id: contact_of(row) for row in rows if (row.team_id, row.id) in wanted}


async def update_contact(tx: Tx, contact: Contact) -> bool:
    """Write every field of ``contact``; False when its new address is another contact's."""
    query = (
        update(contacts)
        .where(contacts.c.team_id == contact.team_id, contacts.c.id == contact.id)
        .values(**_values(contact))
    )
    try:
        async with tx.conn.begin_nested():
            await tx.conn.execute(query)
    except IntegrityError:
        return False
    return True


async def delete_contact(tx: Tx, team_id: str, contact_id: str) -> bool:
    """Remove the contact; its memberships and topic choices go with it (cascade)."""
    query = delete(contacts).where(contacts.c.team_id == team_id, contacts.c.id == contact_id)
    return bool((await tx.conn.execute(query)).rowcount)


def _listed(segment_id: str | None) -> Select[Any]:
    query = select(contacts)
    if segment_id is not None:
        query = query.join(
            segment_members,
            (segment_members.c.contact_id == contacts.c.id)
            & (segment_members.c.segment_id == segment_id),
        )
    return query


async def stream_contacts(tx: Tx, team_id: str, segment_id: str | None) -> AsyncIterator[Contact]:
    """Every contact of the team (of one of its segments), oldest first, in flat memory."""
    query = (
        _listed(segment_id)
        .where(contacts.c.team_id == team_id)
        .order_by(contacts.c.created_at, contacts.c.id)
    )
    result = await tx.conn.stream(query.execution_options(yield_per=STREAM_ROWS))
    async for row in result:
        yield contact_of(row)


async def page_contacts(
    tx: Tx,
    team_id: str,
    segment_id: str | None,
    limit: int,
    anchor: str | None,
    *,
    backwards: bool,
) -> tuple[list[Contact], bool] | None:
    """A page of the team's contacts (of one segment), oldest first, after (before) the contact
    ``anchor``, and whether more lie beyond; None when the team has no such contact."""
    return await read_page(
        tx,
        contacts,
        _listed(segment_id),
        contact_of,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=False,
        backwards=backwards,
    )


async def get_contact_any_team(
    tx: Tx, contact_id: str, *, for_update: bool = False
) -> Contact | None:
    """The contact with this id, whatever its team: for a signed link, whose MAC names the
    team and is checked against the contact found (``core.unsubscribe``)."""
    query = select(contacts).where(contacts.c.id == contact_id)
    if for_update:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    return contact_of(row) if row else None
