"""A team with a high rate takes its tokens in blocks (``services/ratelimit.py``): one statement
per tenth of a second's worth instead of one per request, and never more than the rate allows,
across every process sharing the database."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import select

from posthaste.bootstrap import Services
from posthaste.errors import RateLimitExceeded
from posthaste.services.ratelimit import RateLimiter
from posthaste.storage.tables import rate_limits
from tests.conftest import make_tenant


async def tat(services: Services, team_id: str) -> int:
    async with services.db.read() as tx:
        query = select(rate_limits.c.tat).where(rate_limits.c.team_id == team_id)
        return int((await tx.conn.execute(query)).scalar_one())


async def test_a_block_is_debited_once_and_spent_without_the_database(services: Services) -> None:
    tenant = await make_tenant(services, rate_limit=1000)  # blocks of 100 (0.1 s), 1 ms each
    principal = await services.api_keys.authenticate(tenant.live)
    limiter = RateLimiter(services.db)
    before = time.time_ns() // 1000
    await limiter.check(principal)
    debited = await tat(services, tenant.team.id)
    assert debited >= before + 100 * 1000  # a hundred intervals at once
    for _ in range(50):  # spent from the block: the shared bucket does not move
        await limiter.check(principal)
    assert await tat(services, tenant.team.id) == debited


async def test_processes_together_never_get_more_than_the_bucket(services: Services) -> None:
    """Three limiters (three processes) hammer one team at 50/s (blocks of 5): what they let
    through is at most the burst (twice the rate) plus the rate over the time it took."""
    tenant = await make_tenant(services, rate_limit=50)
    principal = await services.api_keys.authenticate(tenant.live)
    limiters = [RateLimiter(services.db) for _ in range(3)]
    started = time.monotonic()
    allowed = refused = 0
    for n in range(600):
        try:
            await limiters[n % 3].check(principal)
            allowed += 1
        except RateLimitExceeded as exc:
            refused += 1
            assert exc.retry_after >= 1
    elapsed = time.monotonic() - started
    assert refused, "600 requests at once are far over 50/s"
    assert 80 <= allowed <= 100 + 50 * elapsed, (allowed, elapsed)


async def test_concurrent_checks_share_one_block(services: Services) -> None:
    """Many requests at once when a block runs out: one statement takes the next block for all
    of them (on SQLite, a write transaction each would queue behind the send path's)."""
    tenant = await make_tenant(services, rate_limit=1000)
    principal = await services.api_keys.authenticate(tenant.live)
    limiter = RateLimiter(services.db)
    await asyncio.gather(*(limiter.check(principal) for _ in range(60)))
    after = time.time_ns() // 1000
    assert await tat(services, tenant.team.id) <= after + 100 * 1000  # one block's worth
    assert limiter._blocks[tenant.team.id].left == 100 - 60  # all sixty spent from it
