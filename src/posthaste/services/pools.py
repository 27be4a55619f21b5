"""IP pools of direct-to-MX delivery (``mx``): which address a message leaves from, counted
per UTC day across the fleet so that a warming address keeps to its schedule.

``PoolSources`` is the transport's ``SourcePicker``. The addresses of a message's pool take
turns; each message is counted against its address in the database (``storage/pools.take``,
one statement) while the address warms; past its warm-up, a process counts a block of messages
at once, sized by its recent demand, so a busy address costs a statement per block. An address
whose cap for today is used up is skipped until the next UTC day; when the whole pool is, the
mail is held (not sent, no attempt counted) until then. Every choice goes in the transcript.

``PoolQueries`` shows the pools (``GET /pools``, ``posthaste pools``); ``StreamDomainPools``
tells delivery which pool an email leaves from.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from posthaste.adapters.smtp_client import Transcript
from posthaste.adapters.smtp_transports import Source
from posthaste.core import pools as rules
from posthaste.core.ids import ms_to_datetime, now_ms
from posthaste.core.pools import AddressView, Pool, Pools, PoolView
from posthaste.storage import domains as domains_repo
from posthaste.storage import pools as repo
from posthaste.storage import streams as streams_repo
from posthaste.storage.database import Database

log = logging.getLogger(__name__)
Clock = Callable[[], int]

# Past its warm-up, a process counts messages against an address a block at a time: as many as
# it sent from the address in the last ``DEMAND_WINDOW_MS`` (at least one, at most ``BLOCK``),
# so a quiet address's count is exact and a busy one costs a statement per block. While it
# warms, one at a time: its cap is exact.
BLOCK = 16
DEMAND_WINDOW_MS = 1_000
# Held mail comes back in the first minutes of the next UTC day, spread over this.
NEXT_DAY_SPREAD_MS = 10 * 60_000


@dataclass
class _Address:
    """What this process knows of a source address between two statements."""

    first_day: int | None = None
    credit_day: int = -1
    credit: int = 0  # messages counted ahead on ``credit_day``, not yet sent
    used_up_day: int = -1  # the day its cap was found used up
    used: collections.deque[int] = field(default_factory=collections.deque)

    def demand(self, now: int) -> int:
        """Messages this process sent from the address lately: the size of the next block."""
        while self.used and now - self.used[0] > DEMAND_WINDOW_MS:
            self.used.popleft()
        return max(1, min(len(self.used), BLOCK))


@dataclass
class _Turns:
    next: int = 0
    addresses: dict[str, _Address] = field(default_factory=dict)


class PoolSources:
    def __init__(
        self,
        db: Database,
        pools: Pools,
        *,
        clock: Clock = now_ms,
        rng: random.Random | None = None,
    ) -> None:
        self.db = db
        self.pools = pools
        self.clock = clock
        self.rng = rng or random.Random()
        self._turns: dict[str, _Turns] = {}
        self._unknown: set[str] = set()  # pools named but not configured, logged once each

    async def pick(self, pool: str, transcript: Transcript) -> Source:
        found = self.pools.get(pool)
        if found is None:  # named by a stream or domain, then removed from the configuration
            transcript.note(f"pool {pool!r} is not configured: using the default pool")
            if pool not in self._unknown:
                self._unknown.add(pool)
                log.warning("pool %r is named by a stream or domain but not configured", pool)
            found = self.pools.get(rules.DEFAULT)
            assert found is not None
        if not found.addresses:
            transcript.note(f"pool {found.name}: the machine's own address")
            return Source(helo=found.helo)
        return await self._pick_address(found, transcript)

    async def _pick_address(self, pool: Pool, transcript: Transcript) -> Source:
        now = self.clock()
        today = rules.day_of(now)
        turns = self._turns.setdefault(pool.name, _Turns())
        used_up = {a for a, known in turns.addresses.items() if known.used_up_day == today}
        order = rules.in_turn(pool.addresses, turns.next, used_up)
        turns.next = (turns.next + 1) % len(pool.addresses)  # before waiting: the next message
        for address in order:
            known = turns.addresses.setdefault(address, _Address())
            note = await self._take(pool, address, known, today, now)
            if note is not None:
                helo = f" (HELO {pool.helo})" if pool.helo else ""
                transcript.note(f"pool {pool.name}: {address}{helo}, {note}")
                return Source(address, pool.helo)
            known.used_up_day = today
        until = rules.start_of_day(today + 1) + int(self.rng.uniform(0, NEXT_DAY_SPREAD_MS))
        reason = (
            f"every address of pool {pool.name} has used up its warm-up cap for today; "
            f"held until {_clock(until)}"
        )
        transcript.note(f"pool {pool.name}: {reason}, without using up an attempt")
        return Source(hold_until=until, reason=reason)

    async def _take(
        self, pool: Pool, address: str, known: _Address, today: int, now: int
    ) -> str | None:
        """Count one message against ``address`` today: a note for the transcript, or None
        when its cap for today is used up."""
        if known.first_day is None:
            async with self.db.transaction() as tx:
                known.first_day = (await repo.ensure(tx, address, today, now)).first_day
        day = today - known.first_day
        cap = pool.cap(day)
        if cap is None:
            known.used.append(now)
        if cap is None and known.credit_day == today and known.credit > 0:
            known.credit -= 1
            return _uncapped(pool, day)
        count = 1 if cap is not None else known.demand(now)
        async with self.db.transaction() as tx:
            sent = await repo.take(tx, address, today, count, cap, now)
        if sent is None:
            return None
        if cap is None:
            known.credit_day, known.credit = today, count - 1
            return _uncapped(pool, day)
        return f"warm-up day {day + 1} of {len(pool.per_day)}: {sent} of {cap} today"


def _uncapped(pool: Pool, day: int) -> str:
    if not pool.per_day:
        return "no warm-up cap"
    return f"warmed up (day {day + 1}, past its {len(pool.per_day)} days of warm-up)"


def _clock(at_ms: int) -> str:
    return ms_to_datetime(at_ms).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- which pool, and showing them -----------------------------------------------------------


class StreamDomainPools:
    """An email's pool: its stream's, else its sending domain's, else ``default``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def pool_of(self, team_id: str, stream_id: str, domain: str) -> str:
        async with self.db.read() as tx:
            stream = await streams_repo.get_stream(tx, team_id, stream_id)
            found = await domains_repo.find_by_name(tx, team_id, domain)
        return rules.pool_for(
            stream.pool if stream is not None else None,
            found.pool if found is not None else None,
        )


class PoolQueries:
    def __init__(self, db: Database, pools: Pools, *, clock: Clock = now_ms) -> None:
        self.db = db
        self.pools = pools
        self.clock = clock

    async def list(self) -> list[PoolView]:
        """Every pool, ``default`` among them, with each address's warm-up day, cap and count."""
        today = rules.day_of(self.clock())
        async with self.db.read() as tx:
            counts = await repo.list_all(tx)
        views = []
        for pool in self.pools.all():
            addresses = []
            for address in pool.addresses:
                count = counts.get(address)
                day = 0 if count is None else today - count.first_day  # unused: day 0 to come
                addresses.append(
                    AddressView(
                        address=address,
                        warmup_day=None if count is None else day + 1,
                        cap=pool.cap(day),
                        sent_today=0 if count is None else count.sent_on(today),
                    )
                )
            views.append(PoolView(pool.name, pool.helo, pool.per_day, addresses))
        return views
