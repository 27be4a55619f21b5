"""The per-team request rate limit, shared through the database by every process.

GCRA in the database (``storage/limits.py``): one number per team, moved on by one statement
per check. A team with a high rate takes its tokens in blocks: one statement debits up to a
tenth of a second's worth (``BLOCK_SECONDS``, at most ``MAX_BLOCK``) from the shared bucket, and
this process spends them on the next requests within a tenth of a second. The bucket never
gives out more than the rate: a block is debited before it is spent, and what a process does not
spend in time is lost to it (the others meanwhile see the bucket that much emptier). A team at
10 requests/s takes one token at a time, as before.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from posthaste.core.models import Principal
from posthaste.errors import RateLimitExceeded
from posthaste.storage import limits as limits_repo
from posthaste.storage.database import Database

BLOCK_SECONDS = 0.1  # a block holds at most this much of the rate, and is spent within it
BLOCK_US = int(BLOCK_SECONDS * 1_000_000)
MAX_BLOCK = 100


@dataclass
class _Block:
    left: int  # tokens of the block not spent yet
    until_us: int  # they are spent by then, or lost


class RateLimiter:
    """GCRA with a burst of twice the rate; a rate of 0 means unlimited."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._blocks: dict[str, _Block] = {}
        self._taking: dict[str, asyncio.Event] = {}  # a block being taken, by team

    async def check(self, principal: Principal) -> None:
        rate = principal.team.rate_limit
        if rate <= 0:
            return
        size = max(1, min(MAX_BLOCK, int(rate * BLOCK_SECONDS)))
        if size == 1:  # a token at a time, each its own statement
            await self._take(principal, rate, 1)
            return
        team_id = principal.team_id
        while True:
            block = self._blocks.get(team_id)
            if block is not None and block.left > 0 and time.time_ns() // 1000 < block.until_us:
                block.left -= 1  # no await before this: one request per token
                return
            taking = self._taking.get(team_id)
            if taking is None:
                break
            await taking.wait()  # one statement takes the next block for all who wait on it
        taking = self._taking[team_id] = asyncio.Event()
        try:
            await self._take(principal, rate, size)
        finally:
            del self._taking[team_id]
            taking.set()

    async def _take(self, principal: Principal, rate: int, size: int) -> None:
        now_us = time.time_ns() // 1000
        interval_us = 1_000_000 // rate
        burst_us = interval_us * rate * 2
        async with self.db.autocommit() as tx:  # one statement: no BEGIN/COMMIT on PostgreSQL
            wait_us = await limits_repo.take_rate_token(
                tx, principal.team_id, now_us, interval_us, burst_us, size
            )
            if wait_us and size > 1:  # not a whole block left: one token, as the rate allows
                size = 1
                wait_us = await limits_repo.take_rate_token(
                    tx, principal.team_id, now_us, interval_us, burst_us
                )
        if not wait_us:
            if size > 1:
                self._blocks[principal.team_id] = _Block(size - 1, now_us + BLOCK_US)
            return
        retry_after = max(1, -(-wait_us // 1_000_000))
        raise RateLimitExceeded(
            f"Rate limit of {rate} requests per second exceeded; retry in {retry_after} s.",
            retry_after=retry_after,
            limit=rate,
            reset=retry_after,
        )
