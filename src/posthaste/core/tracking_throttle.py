"""Which opens and clicks are recorded: a bound on what fetching a tracking link can write.

A genuine link (and only a genuine one: a forged token is refused before anything is counted)
can be fetched by whoever holds the message, as often as they like, and each recorded hit is an
event row, a webhook delivery per subscribed endpoint and a message on every live stream. So,
in each API process's memory (no write to decide whether to write):

- **one event per visitor per ``window``**: per email, kind, client address and (for clicks)
  link; a reload, a double click, a proxy fetching an image twice are one event;
- **at most ``burst`` events per email, then ``rate`` a second**: many addresses hammering one
  email's links record at most that (a token bucket per email).

The hit is answered either way (the pixel, the redirect); only the event is left out. Both
tables forget their least recently used entries beyond ``max_keys``, so memory stays bounded
whatever arrives; a forgotten entry only makes its next hit recordable again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

WINDOW_SECONDS = 60.0
BURST = 30
RATE_PER_SECOND = 0.5  # 30 a minute once the burst is spent
MAX_KEYS = 50_000
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class TrackingThrottle:
    def __init__(
        self,
        *,
        window: float = WINDOW_SECONDS,
        burst: int = BURST,
        rate: float = RATE_PER_SECOND,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window, self.burst, self.rate, self.max_keys = window, burst, rate, max_keys
        self._clock = clock
        self._seen: OrderedDict[Hashable, float] = OrderedDict()  # visitor key → last recorded
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # (tokens, at)

    def admit(self, visitor: Hashable, email_id: str) -> bool:
        """Whether this hit is recorded (and counted as such)."""
        now = self._clock()
        last = self._seen.get(visitor)
        if last is not None and now - last < self.window:
            return False
        tokens, at = self._buckets.get(email_id, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens < 1:
            _remember(self._buckets, email_id, (tokens, now), self.max_keys)
            return False
        _remember(self._buckets, email_id, (tokens - 1, now), self.max_keys)
        _remember(self._seen, visitor, now, self.max_keys)
        return True


def _remember(table: OrderedDict[_K, _V], key: _K, value: _V, max_keys: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > max_keys:
        table.popitem(last=False)
