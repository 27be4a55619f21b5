"""Message streams: a team's named lanes of mail (transactional, broadcast)."""

from __future__ import annotations

from dataclasses import replace

from posthaste.core.ids import now_ms
from posthaste.core.models import Principal, Stream
from posthaste.core.pools import NO_POOLS, PoolChange, Pools, check_pool
from posthaste.core.streams import DEFAULT_STREAM_IDS, NewStream, StreamChanges
from posthaste.errors import Conflict, NotFound
from posthaste.storage import streams as streams_repo
from posthaste.storage.database import Database


class StreamService:
    """A team's message streams; the two default streams cannot be deleted."""

    def __init__(self, db: Database, pools: Pools = NO_POOLS) -> None:
        self.db = db
        self.pools = pools

    async def create(self, principal: Principal, new: NewStream) -> Stream:
        """Store a new stream for the caller's team; a taken id is ``Conflict``, a pool that is
        not configured ``ValidationError``."""
        check_pool(PoolChange(new.pool), self.pools)
        stream = Stream(new.id, principal.team_id, new.name, new.type, now_ms(), new.pool)
        async with self.db.transaction() as tx:
            if not await streams_repo.insert_stream(tx, stream):
                raise Conflict(f"A stream with id {new.id!r} already exists.")
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

    async def update(self, principal: Principal, stream_id: str, changes: StreamChanges) -> Stream:
        """Rename one of the team's streams or choose its IP pool (parsed at the edge)."""
        check_pool(changes.pool, self.pools)
        async with self.db.transaction() as tx:
            stream = await streams_repo.get_stream(tx, principal.team_id, stream_id)
            if stream is None:
                raise NotFound(f"Stream {stream_id!r} was not found.")
            changed = replace(
                stream,
                name=stream.name if changes.name is None else changes.name,
                pool=stream.pool if changes.pool is None else changes.pool.name,
            )
            await streams_repo.update_stream(tx, changed)
        return changed

    async def delete(self, principal: Principal, stream_id: str) -> None:
        if stream_id in DEFAULT_STREAM_IDS:
            raise Conflict(f"The default stream {stream_id!r} cannot be deleted.")
        async with self.db.transaction() as tx:
            if not await streams_repo.delete_stream(tx, principal.team_id, stream_id):
                raise NotFound(f"Stream {stream_id!r} was not found.")
