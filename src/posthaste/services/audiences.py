"""Message streams and the suppression list."""

from __future__ import annotations

import re
from dataclasses import dataclass

from posthaste.core.addresses import parse_address
from posthaste.core.cursors import Position, encode_cursor
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.models import Principal, Stream, Suppression
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.services.emails import decode_page_cursor
from posthaste.storage import streams as streams_repo
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import Database

_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
STREAM_TYPES = ("transactional", "broadcast")
DEFAULT_STREAM_IDS = ("transactional", "broadcast")
SUPPRESSION_ORIGINS = ("bounce", "complaint", "manual")


class StreamService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self, principal: Principal, stream_id: str | None, name: object, kind: object
    ) -> Stream:
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise ValidationError("'name' is required: 1-200 characters.")
        if kind not in STREAM_TYPES:
            raise ValidationError("'type' must be 'transactional' or 'broadcast'.")
        slug = stream_id if stream_id is not None else _slugify(name)
        if not isinstance(slug, str) or not _SLUG.match(slug):
            raise ValidationError(
                "'id' must be a slug: lowercase letters, digits, '-' and '_', "
                "at most 64 characters."
            )
        stream = Stream(slug, principal.team_id, name.strip(), str(kind), now_ms())
        async with self.db.transaction() as tx:
            if not await streams_repo.insert_stream(tx, stream):
                raise Conflict(f"A stream with id {slug!r} already exists.")
        return stream

    async def all(self, principal: Principal) -> list[Stream]:
        async with self.db.read() as tx:
            return await streams_repo.list_streams(tx, principal.team_id)

    async def get(self, principal: Principal, stream_id: str) -> Stream:
        async with self.db.read() as tx:
            stream = await streams_repo.get_stream(tx, principal.team_id, stream_id)
        if stream is None:
            raise NotFound(f"Stream {stream_id!r} was not found.")
        return stream

    async def rename(self, principal: Principal, stream_id: str, name: object) -> Stream:
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise ValidationError("'name' must be 1-200 characters.")
        async with self.db.transaction() as tx:
            if not await streams_repo.rename_stream(tx, principal.team_id, stream_id, name.strip()):
                raise NotFound(f"Stream {stream_id!r} was not found.")
        return await self.get(principal, stream_id)

    async def delete(self, principal: Principal, stream_id: str) -> None:
        if stream_id in DEFAULT_STREAM_IDS:
            raise Conflict(f"The default stream {stream_id!r} cannot be deleted.")
        async with self.db.transaction() as tx:
            if not await streams_repo.delete_stream(tx, principal.team_id, stream_id):
                raise NotFound(f"Stream {stream_id!r} was not found.")


def _slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", name.strip().lower()).strip("-")[:64]


def _lookup_key(email: str) -> str:
    """The stored form of an address (A-label domain, lower case); raw text if it won't parse."""
    try:
        return parse_address(email, "email").lookup_key
    except ValidationError:
        return email.strip().lower()


@dataclass(frozen=True)
class SuppressionPage:
    items: list[Suppression]
    next_cursor: str


class SuppressionService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self,
        principal: Principal,
        email: object,
        origin: str = "manual",
        source_email_id: str | None = None,
    ) -> Suppression:
        if not isinstance(email, str):
            raise ValidationError("'email' is required: the address to suppress.")
        address = parse_address(email, "email").lookup_key
        item = Suppression(new_id(), principal.team_id, address, origin, source_email_id, now_ms())
        async with self.db.transaction() as tx:
            return await suppressions_repo.add(tx, item)

    async def get(self, principal: Principal, id_or_email: str) -> Suppression:
        async with self.db.read() as tx:
            if is_uuid(id_or_email):
                found = await suppressions_repo.get_by_id(tx, principal.team_id, id_or_email)
            else:
                found = await suppressions_repo.get_by_email(
                    tx, principal.team_id, _lookup_key(id_or_email)
                )
        if found is None:
            raise NotFound(f"Suppression {id_or_email!r} was not found.")
        return found

    async def remove(self, principal: Principal, id_or_email: str) -> Suppression:
        found = await self.get(principal, id_or_email)
        async with self.db.transaction() as tx:
            await suppressions_repo.remove(tx, principal.team_id, found.id)
        return found

    async def page(
        self,
        principal: Principal,
        origin: str | None,
        email: str | None,
        cursor: str | None,
        limit: int,
    ) -> SuppressionPage:
        if origin is not None and origin not in SUPPRESSION_ORIGINS:
            raise ValidationError("'origin' must be one of bounce, complaint, manual.")
        position = decode_page_cursor(cursor)
        lookup = _lookup_key(email) if email else None
        async with self.db.read() as tx:
            rows = await suppressions_repo.list_page(
                tx, principal.team_id, origin, lookup, position, limit + 1
            )
        items = rows[:limit]
        more = len(rows) > limit
        next_cursor = encode_cursor(Position(items[-1].created_at, items[-1].id)) if more else ""
        return SuppressionPage(items, next_cursor)
