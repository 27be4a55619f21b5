"""The suppression list: addresses a team no longer mails (bounced, complained, added)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from posthaste.core.addresses import Address, parse_address
from posthaste.core.cursors import Position, encode_cursor
from posthaste.core.events import EventType
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.models import Event, Principal, Suppression
from posthaste.core.serialize import suppression_record
from posthaste.errors import NotFound, ValidationError
from posthaste.services.emails import decode_page_cursor
from posthaste.storage import events as events_repo
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.keyset import position_of
from posthaste.storage.tables import suppressions


def _lookup_key(email: str) -> str:
    """The stored form of an address (A-label domain, lower case); raw text if it won't parse."""
    try:
        return parse_address(email, "email").lookup_key
    except ValidationError:
        return email.strip().lower()


async def suppress(tx: Tx, item: Suppression) -> Suppression:
    """List an address for its team (the manual add, a bounce, a complaint): a new entry
    records ``suppression.added`` in the same transaction; an address already listed keeps its
    entry, and nothing is recorded."""
    stored = await suppressions_repo.add(tx, item)
    if stored.id == item.id:
        await _record(tx, stored, EventType.SUPPRESSION_ADDED, item.created_at)
    return stored


async def _find(tx: Tx, team_id: str, id_or_email: str) -> Suppression | None:
    if is_uuid(id_or_email):
        return await suppressions_repo.get_by_id(tx, team_id, id_or_email)
    return await suppressions_repo.get_by_email(tx, team_id, _lookup_key(id_or_email))


async def _record(tx: Tx, item: Suppression, kind: EventType, now: int) -> None:
    event = Event(new_id(), item.team_id, kind, None, now, suppression_record(item))
    await events_repo.insert_events(tx, [event])


@dataclass(frozen=True)
class SuppressionPage:
    items: list[Suppression]
    next_cursor: str


class SuppressionService:
    """Add, look up, page through and remove a team's suppressed addresses."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self,
        principal: Principal,
        address: Address,
        origin: str = "manual",
        source_email_id: str | None = None,
    ) -> Suppression:
        """Suppress an address for the team; an address already listed returns its entry."""
        item = Suppression(
            new_id(), principal.team_id, address.lookup_key, origin, source_email_id, now_ms()
        )
        return (await self._store([item]))[0]

    async def add_many(
        self, principal: Principal, addresses: Sequence[Address]
    ) -> list[Suppression]:
        """Suppress every address in one transaction (all or none), in the order given; an
        address already listed keeps its entry; one given twice is listed once."""
        now = now_ms()
        unique = list(dict.fromkeys(a.lookup_key for a in addresses))
        items = [Suppression(new_id(), principal.team_id, e, "manual", None, now) for e in unique]
        return await self._store(items)

    async def _store(self, items: Sequence[Suppression]) -> list[Suppression]:
        async with self.db.transaction() as tx:
            return [await suppress(tx, item) for item in items]

    async def remove_many(self, principal: Principal, refs: Sequence[str]) -> list[Suppression]:
        """Remove the entries named by id or address, in one transaction; names that match
        no entry are passed over (removing is idempotent). The entries removed."""
        removed: dict[str, Suppression] = {}
        now = now_ms()
        async with self.db.transaction() as tx:
            for ref in refs:
                found = await _find(tx, principal.team_id, ref)
                if found is None or found.id in removed:
                    continue
                if await suppressions_repo.remove(tx, principal.team_id, found.id):
                    await _record(tx, found, EventType.SUPPRESSION_REMOVED, now)
                    removed[found.id] = found
        return list(removed.values())

    async def get(self, principal: Principal, id_or_email: str) -> Suppression:
        async with self.db.read() as tx:
            found = await _find(tx, principal.team_id, id_or_email)
        if found is None:
            raise NotFound(f"Suppression {id_or_email!r} was not found.")
        return found

    async def remove(self, principal: Principal, id_or_email: str) -> Suppression:
        found = await self.get(principal, id_or_email)
        async with self.db.transaction() as tx:
            if await suppressions_repo.remove(tx, principal.team_id, found.id):
                await _record(tx, found, EventType.SUPPRESSION_REMOVED, now_ms())
        return found

    async def page(
        self,
        principal: Principal,
        origin: str | None,
        email: str | None,
        cursor: str | None,
        limit: int,
        after: str | None = None,
    ) -> SuppressionPage:
        """One page of the team's suppressions, filtered by origin (parsed at the edge) and
        address; ``after`` (Resend's id cursor: one of the team's suppressions) starts past
        that entry, as the cursor naming it would."""
        position = decode_page_cursor(cursor)
        lookup = _lookup_key(email) if email else None
        async with self.db.read() as tx:
            if after is not None:
                position = await position_of(tx, suppressions, principal.team_id, after)
                if position is None:
                    raise ValidationError("'after' must be the id of one of your suppressions.")
            rows = await suppressions_repo.list_page(
                tx, principal.team_id, origin, lookup, position, limit + 1
            )
        items = rows[:limit]
        more = len(rows) > limit
        next_cursor = encode_cursor(Position(items[-1].created_at, items[-1].id)) if more else ""
        return SuppressionPage(items, next_cursor)
