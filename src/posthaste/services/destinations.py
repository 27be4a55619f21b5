"""Adaptive throttling per destination (``mx`` delivery), shared by every worker of the fleet.

``DestinationThrottle`` is the transport's ``Throttle``. Before a session it takes a slot of
the destination's pace: from a block of slots this process claimed in one statement
(``storage/destinations.claim_slots``), so a busy destination costs one statement per block
and not per message; it waits for a slot less than ``horizon`` away, and holds the mail (not
sent, the job rescheduled, no attempt counted) when the destination is suspended or its slots
are promised further ahead than that; once it knows that, ``busy`` answers without a
statement, so the delivery service holds such mail before starting it. Held mail is given a
turn (``hold``): the destination's row keeps the latest turn given, and each held mail comes
back a step after the one before it, the steps a little shorter than the destination's pace,
so the fleet's held mail returns about as fast as the destination takes it, each mail held
about once. After the session it reads the replies: a "slow down"
(``core/destinations.is_slow_down``, or a burst of failed connections) halves the pace the
fleet actually took (each claim reports the sessions let through since the last) and suspends
the destination with a jittered back-off that grows with repeats, or, when the rate set was
near the pace remembered as too fast, settles 90 % under the pace that drew it after a rest of
a second (``core/destinations.settles``); steady success raises the
rate a step at a time back to the policy's while the fleet uses it, slowly near the pace
remembered as too fast. Every decision goes in the transcript.

``DestinationQueries`` shows the destinations (``GET /destinations``, ``posthaste
destinations``): machine-wide figures, no team's data.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from posthaste.adapters.envelope import RecipientReply
from posthaste.adapters.smtp_client import SmtpUnavailable, Transcript
from posthaste.adapters.smtp_transports import Admission, Busy
from posthaste.core import destinations as rules
from posthaste.core.destinations import DestinationView, Policies, Policy, RecentReply
from posthaste.core.ids import ms_to_datetime
from posthaste.storage import destinations as repo
from posthaste.storage.database import Database

HORIZON_MS = 500  # wait for a slot at most this long; beyond, hold the mail
PRESSED_US = 1_000_000  # the rate is raised only when it held mail back this recently
STALE_SLOT_US = 100_000  # a claimed slot not used within this is given up
# Held mail's turns are this fraction of the destination's interval apart (at the pace it is
# expected to take soon): it comes back a quarter faster than that, so a step up of the rate
# finds mail to use it, and the few that come back too early cost a cheap hold again; turns
# at the rate itself would cap the rate at what it was when the mail was held.
TURN_FRACTION = 0.8
# Destinations this process keeps its own state for before it forgets the quiet ones (their
# pace is in the database: a forgotten one is read again at its next claim).
MAX_LOCAL = 10_000


def _now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class _Local:
    """What this process knows of a destination between two statements."""

    slots: collections.deque[int] = field(default_factory=collections.deque)
    waiting: int = 0  # sessions in ``admit`` now: the size of the next block
    interval_us: int = 0
    strikes: int = 0
    changed_at: int = 0
    ceiling_us: int = 0
    taken_us: int = 0  # the pace the fleet took over the last window, as of the last claim
    unreported: int = 0  # sessions let through since the last claim (``claim_slots(sent=)``)
    pressed_at: int = 0  # the last claim whose slots lay ahead: the rate was what held mail
    suspended_until: int = 0
    busy_until_us: int = 0  # slots promised beyond the horizon until then
    successes: int = 0
    failures: collections.deque[int] = field(default_factory=collections.deque)
    known: bool = False  # its row exists with these MX hosts
    given_up: int = 0  # slots claimed and never used (too late to use)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def take(self, now_us: int) -> int | None:
        # A slot long past is given up rather than used late: late slots used together
        # would be a burst above the rate.
        while self.slots and self.slots[0] < now_us - STALE_SLOT_US:
            self.slots.popleft()
            self.given_up += 1
        if not self.slots:
            return None
        return self.slots.popleft()

    def give_up(self) -> None:
        self.given_up += len(self.slots)
        self.slots.clear()


class DestinationThrottle:
    def __init__(
        self,
        db: Database,
        policies: Policies = rules.NO_OVERRIDES,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.db = db
        self.policies = policies
        self.rng = rng or random.Random()
        self._local: dict[str, _Local] = {}
        self._prune_at = MAX_LOCAL
        self._forgotten_given_up = 0
        # Destinations last seen suspended or with slots taken far ahead: ``holding`` looks at
        # these only, not at every destination this process has sent to.
        self._holding: set[str] = set()
        self._policies: dict[str, Policy] = {}
        # Statements on the destinations' rows, and sessions let through: what a slot costs.
        self.claims = 0
        self.admitted = 0
        self.holds = 0  # mail held back: before its start (``busy``, ``hold``) or at ``admit``
        self.slots = 0  # slots claimed

    @property
    def given_up(self) -> int:
        """Slots claimed and never used: too late to use, or cleared by a decision."""
        return self._forgotten_given_up + sum(local.given_up for local in self._local.values())

    def _policy(self, destination: str) -> Policy:
        found = self._policies.get(destination)
        if found is None:
            if len(self._policies) >= MAX_LOCAL:
                self._policies.clear()
            found = self._policies[destination] = self.policies.for_destination(destination)
        return found

    def _local_of(self, destination: str) -> _Local:
        local = self._local.get(destination)
        if local is None:
            if len(self._local) >= self._prune_at:
                self._forget_quiet()
            local = self._local[destination] = _Local()
        return local

    def _forget_quiet(self) -> None:
        """Drop the state of destinations with nothing going on (no slot in hand, no session
        waiting, not held), so that a sender to many domains keeps a bounded map; the next
        prune waits until the map has doubled from what is left (amortised)."""
        now_us = _now_us()
        for name, local in list(self._local.items()):
            quiet = not local.slots and local.waiting == 0 and not local.lock.locked()
            if quiet and not self._known_busy(local, now_us):
                self._forgotten_given_up += local.given_up
                del self._local[name]
                self._holding.discard(name)
        self._prune_at = max(MAX_LOCAL, 2 * len(self._local))

    def _mark_holding(self, destination: str) -> None:
        self._holding.add(destination)

    # --- before a session ---------------------------------------------------------------

    def holding(self) -> bool:
        now_us = _now_us()
        for name in list(self._holding):
            local = self._local.get(name)
            if local is None or not self._known_busy(local, now_us):
                self._holding.discard(name)
        return bool(self._holding)

    def busy(self, destination: str) -> Busy | None:
        """Before the mail is started: whether this process already knows the destination is
        suspended or its slots are taken beyond the horizon (when it frees, and why)."""
        local = self._local.get(destination)
        if local is None:
            return None
        held = self._known_hold(destination, local, _now_us())
        if held is None or held.hold_until is None:
            return None
        return Busy(destination, held.hold_until, held.reason)

    async def hold(self, destination: str, earliest: int, count: int) -> list[int]:
        """Turns (epoch ms) for ``count`` held mails, none before ``earliest``: after the turns
        the fleet gave before, a little less apart than the destination's pace soon (its rate
        now, or where it climbs back to after a "slow down")."""
        self.holds += count
        policy = self._policy(destination)
        local = self._local_of(destination)
        pace = rules.cruising_interval(local.interval_us, policy, local.ceiling_us)
        step = max(1, int(pace * TURN_FRACTION))
        async with self.db.transaction() as tx:
            first = await repo.queue_holds(tx, destination, count, step, earliest * 1000)
        if first is None:  # never expected: a destination is busy only once its row exists
            return [earliest] * count
        return [(first + i * step) // 1000 for i in range(count)]

    async def admit(
        self,
        destination: str,
        mx_hosts: Sequence[str],
        transcript: Transcript,
        message_id: str = "",
    ) -> Admission:
        policy = self._policy(destination)
        local = self._local_of(destination)
        local.waiting += 1
        try:
            slot = await self._slot(destination, list(mx_hosts), policy, local)
        finally:
            local.waiting -= 1
        if isinstance(slot, Admission):
            return await self._held(destination, slot, transcript)
        self.admitted += 1
        local.unreported += 1
        rate = rules.format_rate(rules.US / max(local.interval_us, policy.interval_us))
        wait_us = slot - _now_us()
        if wait_us > 0:
            transcript.note(f"throttle: {destination} at {rate}: waiting {wait_us // 1000} ms")
            await asyncio.sleep(wait_us / rules.US)
            held = self._known_hold(destination, local, _now_us())  # suspended meanwhile
            if held is not None:
                return await self._held(destination, held, transcript)
        else:
            transcript.note(f"throttle: {destination} at {rate}")
        transcript.admitted_at = _now_us() // 1000
        return Admission(policy.max_connections, policy.messages_per_connection)

    async def _held(self, destination: str, held: Admission, transcript: Transcript) -> Admission:
        """``held`` (its earliest time) with the mail's turn."""
        (turn,) = await self.hold(destination, held.hold_until or 0, 1)
        transcript.note(f"throttle: {held.reason}; the mail is held until {_clock(turn)}")
        return Admission(0, 0, hold_until=turn, reason=held.reason)

    async def _slot(
        self, name: str, mx_hosts: list[str], policy: Policy, local: _Local
    ) -> int | Admission:
        """A slot time (epoch µs), or the hold (from when) when there is none soon."""
        async with local.lock:
            return await self._slot_or_hold(name, mx_hosts, policy, local)

    async def _slot_or_hold(
        self, name: str, mx_hosts: list[str], policy: Policy, local: _Local
    ) -> int | Admission:
        now_us = _now_us()
        held = self._known_hold(name, local, now_us)
        if held is not None:
            return held
        slot = local.take(now_us)
        if slot is not None:
            return slot
        if not local.known:
            async with self.db.transaction() as tx:
                await repo.ensure(tx, name, mx_hosts, policy.interval_us, now_us // 1000)
            local.known = True
        pace_us = max(local.interval_us, policy.interval_us)
        # As many slots as sessions wait for one: a slot claimed for a session yet to come
        # is lost to the whole fleet when none comes before it goes stale, and a busy
        # worker lost a fifth to nearly a third of its slots that way (bench/README.md).
        count = rules.block_size(pace_us, local.waiting)
        self.claims += 1
        async with self.db.transaction() as tx:
            block = await repo.claim_slots(
                tx,
                name,
                count,
                policy.interval_us,
                now_us,
                HORIZON_MS * 1000,
                sent=local.unreported,
            )
            pace = None if block is not None else await repo.get(tx, name)
        if block is None:
            return self._hold_for(name, local, pace, now_us)
        local.unreported = 0
        local.interval_us, local.strikes = block.interval_us, block.strikes
        local.ceiling_us, local.busy_until_us = block.ceiling_us, 0
        local.changed_at, local.taken_us = block.changed_at, block.used_interval_us
        if block.start_us > now_us:
            local.pressed_at = now_us
        self.slots += block.count
        local.slots.extend(block.start_us + i * block.step_us for i in range(block.count))
        return local.slots.popleft()

    @staticmethod
    def _known_busy(local: _Local, now_us: int) -> bool:
        return (
            local.suspended_until > now_us // 1000
            or local.busy_until_us > now_us + HORIZON_MS * 1000
        )

    def _known_hold(self, name: str, local: _Local, now_us: int) -> Admission | None:
        now = now_us // 1000
        if local.suspended_until > now:
            until = local.suspended_until
            return self._hold(name, local, until, f"suspended until {_clock(until)}")
        if local.busy_until_us > now_us + HORIZON_MS * 1000:
            at = local.busy_until_us // 1000 - HORIZON_MS
            return self._hold(name, local, at, f"its slots are taken until {_clock(at)}")
        return None

    def _hold_for(self, name: str, local: _Local, pace: repo.Pace | None, now_us: int) -> Admission:
        if pace is None:  # never expected: the row was just ensured
            return self._hold(name, local, now_us // 1000, "no throttle row")
        local.interval_us, local.strikes, local.changed_at = (
            pace.interval_us,
            pace.strikes,
            pace.changed_at,
        )
        local.ceiling_us = pace.ceiling_us
        local.give_up()
        if pace.suspended_until > now_us // 1000:
            until = local.suspended_until = pace.suspended_until
            self._mark_holding(name)
            return self._hold(name, local, until, f"suspended until {_clock(until)}")
        local.busy_until_us = pace.next_slot_us
        self._mark_holding(name)
        at = pace.next_slot_us // 1000 - HORIZON_MS
        taken = _clock(pace.next_slot_us // 1000)
        return self._hold(name, local, at, f"its slots are taken until {taken}")

    def _hold(self, name: str, local: _Local, at: int, reason: str) -> Admission:
        """Hold from ``at`` on (the mail's turn comes from ``hold``), saying why."""
        rate = rules.format_rate(rules.US / max(local.interval_us, self._policy(name).interval_us))
        return Admission(0, 0, hold_until=at, reason=f"destination {name} at {rate}, {reason}")

    # --- after a session ----------------------------------------------------------------

    async def observe(
        self,
        destination: str,
        replies: Sequence[RecipientReply],
        failed: SmtpUnavailable | None,
        transcript: Transcript,
    ) -> int | None:
        policy = self._policy(destination)
        local = self._local_of(destination)
        now = _now_us() // 1000
        answers = [(r.code, r.text) for r in replies]
        if failed is not None:
            answers.append((failed.code, failed.text))
        slow = next(((c, t) for c, t in answers if rules.is_slow_down(c, t)), None)
        if slow is not None:
            return await self._slow_down(destination, policy, f"{slow[0]} {slow[1]}", transcript)
        if failed is not None:
            return await self._failed_connection(
                destination, policy, local, failed, now, transcript
            )
        if any(200 <= r.code < 300 for r in replies):
            local.successes += 1
            local.failures.clear()
            await self._maybe_speed_up(destination, policy, local, now, transcript)
        return None

    async def _failed_connection(
        self,
        name: str,
        policy: Policy,
        local: _Local,
        failed: SmtpUnavailable,
        now: int,
        transcript: Transcript,
    ) -> int | None:
        """Refused or timed-out connections in a burst count as one "slow down"."""
        local.failures.append(now)
        while local.failures and now - local.failures[0] > rules.CONNECTION_BURST_MS:
            local.failures.popleft()
        if len(local.failures) < rules.CONNECTION_BURST:
            return None
        local.failures.clear()
        reply = f"{failed.code} {failed.text} ({rules.CONNECTION_BURST} failed connections)"
        return await self._slow_down(name, policy, reply, transcript)

    async def _slow_down(
        self, name: str, policy: Policy, reply: str, transcript: Transcript
    ) -> int:
        """Halve the rate and suspend, unless another worker has just done so (then its
        suspension stands); the time the deferred mail waits until."""
        local = self._local_of(name)
        now = _now_us() // 1000
        began = transcript.admitted_at or now - transcript.elapsed_ms()
        async with self.db.transaction() as tx:
            pace = await repo.get(tx, name, for_update=True)
            if pace is None:
                return now
            if pace.suspended_until > now:
                until = pace.suspended_until
                decision = f"already suspended until {_clock(until)}"
            elif began < pace.suspended_until:
                # Let go before the last suspension ended, so sent before it began (no slot
                # is given while suspended) or during it by a worker that did not know yet:
                # that decision has answered it already, and halving again would punish one
                # burst twice. Not the last change: a step up since is no answer to it.
                until = now
                decision = "from a session let go before the last suspension ended; no new one"
            else:
                strikes = rules.strikes_after(pace.strikes, pace.suspended_until, now)
                taken = pace.taken_interval_us(now * 1000)
                too_fast = rules.too_fast(max(pace.interval_us, policy.interval_us), taken)
                before = rules.format_rate(rules.US / too_fast)
                if too_fast > max(pace.interval_us, policy.interval_us):
                    nominal = rules.US / max(pace.interval_us, policy.interval_us)
                    before = f"{before} (taken of {rules.format_rate(nominal)} set)"
                drew = rules.limit_shown(max(pace.interval_us, policy.interval_us), taken)
                if rules.settles(
                    max(pace.interval_us, policy.interval_us), pace.ceiling_us, strikes
                ):
                    # The known limit touched: a margin under the pace that drew it, not half.
                    slower = rules.settled(drew)
                    until = now + rules.settle_ms(self.rng)
                    how = f" ({rules.SETTLE_MARGIN:.0%} of it: the limit known, touched)"
                else:
                    # Half the pace taken, but never under a quarter of the rate set: early in
                    # a window the count says little (0.84/s taken of 200/s set, a rate of
                    # 25/min for the rest of a run, bench/README.md).
                    slower = rules.halved(drew)
                    until = now + rules.backoff_ms(strikes, self.rng)
                    how = ""
                ceiling = rules.remembered_ceiling(pace.ceiling_us, drew)
                decision = (
                    f"rate {before} -> {rules.format_rate(rules.US / slower)}{how}, suspended "
                    f"{(until - now) / 1000:.1f} s until {_clock(until)} (strike {strikes}); "
                    f"{rules.format_rate(rules.US / ceiling)} remembered as too fast"
                )
                suspension = repo.Suspension(slower, until, strikes, ceiling)
                await repo.suspend(tx, name, suspension, now, reply, decision)
                local.interval_us, local.strikes, local.changed_at = slower, strikes, now
                local.ceiling_us = ceiling
        local.suspended_until, local.successes = until, 0
        self._mark_holding(name)
        local.give_up()
        (turn,) = await self.hold(name, until, 1)
        transcript.note(
            f"throttle: {name} answered {reply!r}: {decision}; the deferred mail waits "
            f"until {_clock(turn)} without using up an attempt"
        )
        return turn

    async def _maybe_speed_up(
        self, name: str, policy: Policy, local: _Local, now: int, transcript: Transcript
    ) -> None:
        """Additive increase: a step towards the policy's rate after steady success."""
        below = local.interval_us > policy.interval_us or local.strikes > 0
        if not below or local.successes < rules.INCREASE_AFTER:
            return
        if now * 1000 - local.pressed_at > PRESSED_US:
            return  # the rate is not what limits this process now: raising it proves nothing
        current = max(local.interval_us, policy.interval_us)
        every = rules.step_every_ms(current, local.ceiling_us)
        if now - local.changed_at < every:
            return
        local.successes = 0
        if not rules.in_use(current, local.taken_us):
            # The fleet takes well under the rate: a step up would only let its sends bunch
            # above what the receiver was shown to take.
            local.changed_at = now
            return
        faster = rules.raised(current, policy, local.ceiling_us)
        async with self.db.transaction() as tx:
            done = await repo.speed_up(tx, name, local.interval_us, faster, now, every)
        if done:
            before, after = rules.US / current, rules.US / faster
            transcript.note(
                f"throttle: {name}: steady success, rate {rules.format_rate(before)} -> "
                f"{rules.format_rate(after)}"
            )
            local.interval_us, local.changed_at = faster, now
            local.strikes = max(local.strikes - 1, 0)
            # The slots claimed already stay: they are at the slower pace, and given up they
            # would be lost to the whole fleet (the row has moved past them).
        else:
            local.changed_at = now  # someone else moved it: learn it at the next claim


def _clock(at_ms: int) -> str:
    return ms_to_datetime(at_ms).strftime("%H:%M:%S.%f")[:-3] + "Z"


# --- showing them ---------------------------------------------------------------------------


class DestinationQueries:
    def __init__(self, db: Database, policies: Policies = rules.NO_OVERRIDES) -> None:
        self.db = db
        self.policies = policies

    async def list(self, recent: int = 10) -> list[DestinationView]:
        """Every destination seen, by name, with its newest replies behind decisions."""
        now = _now_us() // 1000
        async with self.db.read() as tx:
            paces = await repo.list_all(tx)
            replies = await repo.recent_replies(tx, recent)
        views = []
        for pace in paces:
            policy = self.policies.for_destination(pace.name)
            interval = max(pace.interval_us, policy.interval_us)
            views.append(
                DestinationView(
                    name=pace.name,
                    mx_hosts=pace.mx_hosts,
                    state=rules.state_of(interval, pace.suspended_until, policy, now),
                    rate=rules.US / interval,
                    policy=policy,
                    suspended_until=pace.suspended_until if pace.suspended_until > now else None,
                    recent=[
                        RecentReply(r.at, r.reply, r.decision) for r in replies.get(pace.name, [])
                    ],
                )
            )
        return views
