"""The per-team request rate limit, shared through the database by every process."""

from __future__ import annotations

import time

from posthaste.core.models import Principal
from posthaste.errors import RateLimitExceeded
from posthaste.storage import limits as limits_repo
from posthaste.storage.database import Database


class RateLimiter:
    """GCRA with a burst of twice the rate (PRODUCT §11); a rate of 0 means unlimited."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def check(self, principal: Principal) -> None:
        rate = principal.team.rate_limit
        if rate <= 0:
            return
        interval_us = 1_000_000 // rate
        burst_us = interval_us * rate * 2
        now_us = time.time_ns() // 1000
        async with self.db.transaction() as tx:
            wait_us = await limits_repo.take_rate_token(
                tx, principal.team_id, now_us, interval_us, burst_us
            )
        if wait_us:
            retry_after = max(1, -(-wait_us // 1_000_000))
            raise RateLimitExceeded(
                f"Rate limit of {rate} requests per second exceeded; retry in {retry_after} s.",
                retry_after=retry_after,
                limit=rate,
                reset=retry_after,
            )
