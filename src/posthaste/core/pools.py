"""IP pools of direct-to-MX delivery, as pure rules: which pool a message leaves from, which of
the pool's source addresses takes it, and each address's warm-up cap for the day.

A pool is a set of source addresses with one HELO name (TOML ``[pools.<name>]``); a stream's
pool wins over its sending domain's, which wins over ``default`` (the machine's own address,
unless ``[pools.default]`` names addresses). An address warms up on a schedule of daily caps
(``[pools.<name>.warmup] per_day = [50, 100, ...]``): day ``k`` of its warm-up (counted in UTC
days from the first day it sent) it takes at most ``per_day[k]`` messages; past the end of the
list, no cap. Within a pool, addresses take turns, skipping those whose cap for today is used up.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from posthaste.core.text import json_type
from posthaste.errors import ValidationError

DEFAULT = "default"
DAY_MS = 86_400_000
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
POOL_KEYS = ("addresses", "helo", "warmup")
WARMUP_KEYS = ("per_day",)


@dataclass(frozen=True)
class Pool:
    """Source addresses to bind (none: the machine's own), their HELO name, their warm-up."""

    name: str
    addresses: tuple[str, ...] = ()
    helo: str | None = None  # None: the region's POSTHASTE_MX_HOST, as without pools
    per_day: tuple[int, ...] = ()  # the warm-up's daily caps, day 0 first; () none

    def cap(self, warmup_day: int) -> int | None:
        """The day's cap of an address on day ``warmup_day`` of its warm-up; None: no cap."""
        if 0 <= warmup_day < len(self.per_day):
            return self.per_day[warmup_day]
        return None


@dataclass(frozen=True)
class Pools:
    """The configured pools, ``default`` always among them."""

    configured: Mapping[str, Pool] = field(default_factory=dict)

    def get(self, name: str) -> Pool | None:
        if name == DEFAULT and DEFAULT not in self.configured:
            return Pool(DEFAULT)
        return self.configured.get(name)

    @property
    def names(self) -> list[str]:
        return sorted({DEFAULT, *self.configured})

    @property
    def any(self) -> bool:
        """Whether any pool is configured: else every message leaves as without pools."""
        return bool(self.configured)

    def all(self) -> list[Pool]:
        return [pool for name in self.names if (pool := self.get(name)) is not None]


NO_POOLS = Pools()


def pool_for(stream_pool: str | None, domain_pool: str | None) -> str:
    """The pool a message leaves from: its stream's, else its sending domain's, else default."""
    return stream_pool or domain_pool or DEFAULT


def day_of(at_ms: int) -> int:
    """The UTC day (days since 1970-01-01) of an epoch-ms time: warm-up counts these."""
    return at_ms // DAY_MS


def start_of_day(day: int) -> int:
    return day * DAY_MS


def in_turn(addresses: Sequence[str], turn: int, used_up: set[str]) -> list[str]:
    """The addresses to try, starting at the ``turn``-th (round-robin) and skipping those known
    to have used up today's cap."""
    count = len(addresses)
    ordered = [addresses[(turn + i) % count] for i in range(count)] if count else []
    return [address for address in ordered if address not in used_up]


# --- configuration and requests -------------------------------------------------------------


def parse_pool_name(value: object, label: str = "'pool'") -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(
            f"{label} must be a pool name: lowercase letters, digits, '-' and '_', "
            f"at most 64 characters, got {value!r}"
        )
    return value


def parse_source_address(value: object) -> str:
    """A source address to bind: an IPv4 or IPv6 address, in its canonical form."""
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        raise ValueError(f"expected an IPv4 or IPv6 address, got {value!r}") from None


def parse_per_day(value: object) -> tuple[int, ...]:
    """The warm-up's daily caps: a list of whole numbers of at least 1."""
    if not isinstance(value, list) or not value:
        raise ValueError("expected a list of daily caps such as [50, 100, 200]")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise ValueError(f"each daily cap must be a whole number of at least 1, got {item!r}")
    return tuple(value)


def check_addresses_apart(pools: Sequence[Pool]) -> None:
    """An address belongs to one pool: its daily count is its own."""
    seen: dict[str, str] = {}
    for pool in pools:
        for address in pool.addresses:
            if address in seen and seen[address] != pool.name:
                raise ValueError(f"{address} is in two pools: {seen[address]} and {pool.name}")
            seen[address] = pool.name


@dataclass(frozen=True)
class PoolChange:
    """A ``pool`` given in a request body: a pool's name, or None to choose none."""

    name: str | None


def parse_pool_field(fields: Mapping[str, object]) -> PoolChange | None:
    """``pool`` of a stream's or domain's body: absent (None), null (no pool) or a name. Whether
    the pool is configured is the service's to check (``check_pool``)."""
    if "pool" not in fields:
        return None
    value = fields["pool"]
    if value is None:
        return PoolChange(None)
    if not isinstance(value, str):
        raise ValidationError(f"'pool' must be a pool's name or null, got {json_type(value)}.")
    try:
        return PoolChange(parse_pool_name(value))
    except ValueError as exc:
        raise ValidationError(f"{exc}.") from None


def check_pool(change: PoolChange | None, pools: Pools) -> None:
    """A configured pool, or ``ValidationError`` naming the field and the pools there are."""
    if change is None or change.name is None or pools.get(change.name) is not None:
        return
    raise ValidationError(
        f"'pool' must be one of: {', '.join(pools.names)} (see GET /pools); "
        f"there is no pool {change.name!r}."
    )


# --- showing them ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AddressView:
    address: str
    warmup_day: int | None  # None: never used yet
    cap: int | None  # today's; None: no cap
    sent_today: int


@dataclass(frozen=True)
class PoolView:
    name: str
    helo: str | None
    per_day: tuple[int, ...]
    addresses: list[AddressView]
