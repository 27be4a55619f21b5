"""Message streams: a team's named lanes of mail (transactional, broadcast)."""

from __future__ import annotations

import re

from posthaste.core.ids import now_ms
from posthaste.core.models import Principal, Stream
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.storage import streams as streams_repo
from posthaste.storage.database import Database

_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
STREAM_TYPES = ("transactional", "broadcast")
DEFAULT_STREAM_IDS = ("transactional", "broadcast")


class StreamService:
    """A team's message streams; the two default streams cannot be deleted."""

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
