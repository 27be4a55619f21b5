"""Destinations and their throttle, as pure arithmetic: policies, "slow down" replies, AIMD.

A destination is the registered domain of a recipient domain's primary MX host (``google.com``
for gmail.com, googlemail.com and every Workspace company). Its policy caps the connections a
worker process opens to it, the messages sent per connection and the fleet's rate; the current
rate adapts below the policy's (additive increase, multiplicative decrease): a "slow down" reply
halves it and suspends the destination for a jittered back-off, or, at a limit already known,
settles a margin under the pace that drew it after a rest of a second; steady success raises it
again step by step. The rate is kept as the interval between two messages, in microseconds, so the
database works on integers (``storage/destinations.py``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from posthaste.core.delivery import enhanced_status

US = 1_000_000  # microseconds per second
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$", re.I)
_PER = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}

# A suspension after "slow down": 2 s, doubling with each repeat, at most 40 s, times a jitter
# of 0.75-1.0 so the fleet's workers do not come back in step; a receiver that recovers gets
# mail again within a minute.
BACKOFF_BASE_MS = 2_000
BACKOFF_CAP_MS = 40_000
# The rate never falls below one message per 10 s: there is always a probe.
SLOWEST_INTERVAL_US = 10 * US
# Additive increase: a tenth of the policy's rate per step, a step at most once a second and
# after ``INCREASE_AFTER`` successes seen by one process since its last step; up to 90 % of the
# rate remembered as too fast (``CEILING_MARGIN``), then approaching it slowly, a hundredth of
# it every ``PROBE_EVERY_MS``; past it (a limit learnt too low, from a burst), each step as
# large as the way already come beyond it (``raised``). Each probe that finds the limit costs a
# suspension, so they are rare, and the rate stays just under the limit most of the time.
INCREASE_FRACTION = 0.1
CEILING_MARGIN = 0.9
PROBE_FRACTION = 0.01
PROBE_EVERY_MS = 2_000
# A "slow down" with the rate set near the rate remembered as too fast (at 80 % of it or more: the
# receiver's limit is known and was just touched) is no reason to halve: the rate goes to
# ``SETTLE_MARGIN`` of the pace that drew it and the destination rests ``SETTLE_MS`` (jittered), a
# receiver's sliding second (half a second let the rest of the burst draw more "slow down"s within
# two seconds, each settling 10 % lower: a ratchet); then it probes again. Halving and the growing
# back-off (AIMD) stay for a limit not known yet, a rate far under the one remembered, and "slow
# down"s that keep coming (``SETTLE_STRIKES`` in a row without a calm spell).
SETTLE_MARGIN = 0.9
SETTLE_FROM = 0.8  # of the rate remembered as too fast: below, a "slow down" halves
SETTLE_MS = 1_000
SETTLE_STRIKES = 2
# The back-off count starts over when the last suspension ended this long ago.
CALM_MS = 10_000
INCREASE_EVERY_MS = 1_000
INCREASE_AFTER = 5
# Refused or timed-out connections this close together (per process) count as one "slow down".
CONNECTION_BURST = 5
CONNECTION_BURST_MS = 10_000


class DestinationState(StrEnum):
    ACTIVE = "active"  # at its policy's rate
    THROTTLED = "throttled"  # below its policy's rate after a "slow down"
    SUSPENDED = "suspended"  # holding mail until ``suspended_until``


@dataclass(frozen=True)
class Policy:
    """What Posthaste allows itself towards one destination."""

    max_connections: int = 8  # per worker process
    messages_per_connection: int = 100
    rate: float = 20.0  # messages per second, for the whole fleet

    @property
    def interval_us(self) -> int:
        """The shortest time between two messages, in microseconds."""
        return max(1, int(US / self.rate))


DEFAULT = "default"
# Starting points, adapted by the throttle; sources and reasons in docs/deliverability.md.
SHIPPED_POLICIES: Mapping[str, Policy] = {
    DEFAULT: Policy(max_connections=8, messages_per_connection=100, rate=20.0),
    "google.com": Policy(max_connections=10, messages_per_connection=50, rate=20.0),
    "outlook.com": Policy(max_connections=5, messages_per_connection=50, rate=10.0),
    "yahoodns.net": Policy(max_connections=5, messages_per_connection=20, rate=10.0),
    "icloud.com": Policy(max_connections=5, messages_per_connection=50, rate=10.0),
}
POLICY_KEYS = ("max_connections", "messages_per_connection", "rate")


def parse_rate(text: str) -> float:
    """``"600/min"``, ``"20/s"``, ``"36000/hour"`` → messages per second (> 0)."""
    found = _RATE.match(text)
    if found is None:
        raise ValueError(f'expected a rate such as "20/s", "600/min" or "36000/h", got {text!r}')
    count = float(found[1])
    if count <= 0:
        raise ValueError(f"a rate must be above zero, got {text!r}")
    return count / _PER[found[2].lower()]


def format_rate(per_second: float) -> str:
    """Messages per second for people: ``20/s``, ``2.5/s``, ``30/min`` below one a second."""
    if per_second >= 1:
        return f"{per_second:.4g}/s"
    return f"{per_second * 60:.4g}/min"


@dataclass(frozen=True)
class Policies:
    """The shipped policies under the configured ones (``[destinations.<name>]``), each key of
    a configured table over ``[destinations.default]``'s, over the shipped table's."""

    configured: Mapping[str, Mapping[str, object]]

    def for_destination(self, name: str) -> Policy:
        base = SHIPPED_POLICIES.get(name, SHIPPED_POLICIES[DEFAULT])
        values: dict[str, object] = {
            "max_connections": base.max_connections,
            "messages_per_connection": base.messages_per_connection,
            "rate": base.rate,
        }
        values.update(self.configured.get(DEFAULT, {}))
        values.update(self.configured.get(name, {}))
        return Policy(
            max_connections=int(values["max_connections"]),  # type: ignore[call-overload]
            messages_per_connection=int(values["messages_per_connection"]),  # type: ignore[call-overload]
            rate=float(values["rate"]),  # type: ignore[arg-type]
        )


NO_OVERRIDES = Policies({})


def is_slow_down(code: int, text: str) -> bool:
    """A receiver asking us to slow down: 421 (service not available, closing), 451/452 with an
    enhanced 4.7.x (policy: rate, reputation), and Gmail's 4.7.28 whatever the code."""
    status = enhanced_status(text)
    if status is not None and status[:2] == (4, 7) and status[2] == 28:
        return True
    if code == 421:
        return status is None or status[:2] != (4, 7) or status[2] != 10  # 4.7.10 is our TLS
    return code in (451, 452) and status is not None and status[:2] == (4, 7)


def backoff_ms(strikes: int, rng: random.Random) -> int:
    """The suspension after the ``strikes``-th "slow down" in a row (1, 2, ...), jittered."""
    full = min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** min(max(strikes - 1, 0), 16))
    return int(full * rng.uniform(0.75, 1.0))


def near_ceiling(set_us: int, ceiling_us: int) -> bool:
    """Whether the rate set (``set_us``) is where a "slow down" means the limit remembered as
    too fast (``ceiling_us``, 0 for none) was touched: at ``SETTLE_FROM`` of it or faster,
    which takes in the rate just settled 90 % under a pace that drew the last one (a rate
    settled so, 44.9/s under 52.6/s remembered, had its next "slow down" halved)."""
    return ceiling_us > 0 and US / set_us >= SETTLE_FROM * US / ceiling_us * 0.999


def settles(set_us: int, ceiling_us: int, strikes: int) -> bool:
    """Whether a "slow down" is answered by settling under the pace that drew it rather than
    by halving (``SETTLE_MARGIN``): the limit is known and the rate set (``set_us``) was at
    its margin, so the approach touched it (the pace taken, counted from the workers' claims,
    is too noisy to tell: 41.8/s taken of 44.4/s set under 48.8/s remembered); not overrun
    again and again (``strikes``: this one's count in a row, 1 after a calm spell)."""
    return strikes <= SETTLE_STRIKES and near_ceiling(set_us, ceiling_us)


def settled(too_fast_us: int) -> int:
    """A margin under the pace that drew a "slow down" near the known limit."""
    return min(int(too_fast_us / SETTLE_MARGIN), SLOWEST_INTERVAL_US)


def settle_ms(rng: random.Random) -> int:
    """The rest after a "slow down" answered by settling: the receiver's sliding second,
    jittered as ``backoff_ms``."""
    return int(SETTLE_MS * rng.uniform(0.75, 1.0))


def halved(interval_us: int) -> int:
    """Multiplicative decrease: half the rate (twice the interval), never below the probe."""
    return min(interval_us * 2, SLOWEST_INTERVAL_US)


def raised(interval_us: int, policy: Policy, ceiling_us: int = 0) -> int:
    """Additive increase: a tenth of the policy's rate more, up to 90 % of the rate remembered
    as too fast (``ceiling_us``, 0 for none); from there a hundredth of that rate more a step
    up to it; past it, a hundredth or as much as the rate is already above it, whichever is
    more (each probe that passes doubles the next, so a ceiling learnt too low, from a burst,
    is left behind within half a minute); never above the policy."""
    rate = US / interval_us
    if ceiling_us <= 0:
        faster = rate + policy.rate * INCREASE_FRACTION
    else:
        ceiling = US / ceiling_us
        if rate < CEILING_MARGIN * ceiling * 0.999:
            faster = min(rate + policy.rate * INCREASE_FRACTION, CEILING_MARGIN * ceiling)
        elif rate < ceiling * 0.999:
            faster = min(rate + PROBE_FRACTION * ceiling, ceiling)
        else:
            faster = rate + max(PROBE_FRACTION * ceiling, rate - ceiling)
    return max(policy.interval_us, int(US / faster))


def step_every_ms(interval_us: int, ceiling_us: int = 0) -> int:
    """How long the rate stays put before the next step up: a second while it climbs back
    towards 90 % of the rate remembered as too fast, ``PROBE_EVERY_MS`` from there."""
    if ceiling_us > 0 and US / interval_us >= CEILING_MARGIN * US / ceiling_us * 0.999:
        return PROBE_EVERY_MS
    return INCREASE_EVERY_MS


def cruising_interval(interval_us: int, policy: Policy, ceiling_us: int = 0) -> int:
    """The pace the destination is expected to take soon: its rate now, or 90 % of the rate
    remembered as too fast when that is faster (a "slow down" halved the rate, which climbs
    back there within seconds); never faster than the policy. Held mail's turns follow it."""
    current = max(interval_us, policy.interval_us)
    if ceiling_us <= 0:
        return current
    return max(policy.interval_us, min(current, int(ceiling_us / CEILING_MARGIN)))


def remembered_ceiling(previous_us: int, too_fast_us: int) -> int:
    """The pace to remember as too fast after a "slow down" at ``too_fast_us``: that pace,
    unless it is slower than the one remembered (``previous_us``, 0 for none) but within its
    margin, the approach beyond 90 % of it: then halfway between the two, so a burst that draws
    a "slow down" a little under the receiver's limit does not pull the ceiling down by a
    margin each time (a ratchet), while a receiver that takes much less now is learnt at once."""
    if previous_us <= 0 or too_fast_us <= previous_us:
        return too_fast_us
    before, now = US / previous_us, US / too_fast_us
    if now < CEILING_MARGIN * before * 0.999:
        return too_fast_us
    return int(US / ((before + now) / 2))


def too_fast(interval_us: int, taken_us: int) -> int:
    """The pace that drew a "slow down": the one set, or the one the fleet actually took when
    that was slower (workers that cannot keep up with the rate set send less than it; halving
    a rate nobody reaches would not slow anything down). ``taken_us`` 0: unknown."""
    return max(interval_us, taken_us)


def limit_shown(interval_us: int, taken_us: int) -> int:
    """What a "slow down" shows of the receiver's limit, to remember as too fast: the pace
    taken (``too_fast``), but never less than half the rate set. The pace taken is counted
    from what each worker reports at its next claim, so a second's count can miss a worker's
    block; far under the rate set, it says more about the count than about the receiver
    (15/s measured for a "slow down" at 97/s set, from a receiver that takes 50/s, kept the
    rate under 15/s for a minute), and halving the rate set is what a "slow down" teaches."""
    return min(too_fast(interval_us, taken_us), 2 * interval_us)


def in_use(interval_us: int, taken_us: int) -> bool:
    """Whether the fleet takes most of the rate set (at least 80 %): only then does steady
    success say anything about a faster one."""
    return taken_us > 0 and taken_us * 4 <= interval_us * 5


def strikes_after(strikes: int, suspended_until: int, now_ms: int) -> int:
    """The back-off count of a new "slow down": one more, or 1 after a calm spell."""
    return 1 if now_ms - suspended_until > CALM_MS else strikes + 1


def block_size(interval_us: int, waiting: int) -> int:
    """How many slots a process claims at once: one for each of its sessions waiting for a
    slot (at least one), at most a quarter second of the rate, at most 64."""
    quarter = max(1, (US // 4) // max(interval_us, 1))
    return max(1, min(waiting, quarter, 64))


def state_of(interval_us: int, suspended_until: int, policy: Policy, now_ms: int) -> str:
    if suspended_until > now_ms:
        return DestinationState.SUSPENDED.value
    if interval_us > policy.interval_us:
        return DestinationState.THROTTLED.value
    return DestinationState.ACTIVE.value


@dataclass(frozen=True)
class RecentReply:
    at: int
    reply: str
    decision: str


@dataclass(frozen=True)
class DestinationView:
    """A destination as ``GET /destinations`` shows it: machine-wide, no team's data."""

    name: str
    mx_hosts: list[str]
    state: str
    rate: float  # messages per second now
    policy: Policy
    suspended_until: int | None
    recent: list[RecentReply]
