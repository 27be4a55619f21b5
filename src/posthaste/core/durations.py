"""Durations as operators write them: ``500ms``, ``10s``, ``5m``, ``2h``, ``3d`` or bare seconds.

Pure parsing and formatting for retry schedules, timeouts and leases (configuration) and for logs.
``parse_duration(format_duration(x)) == x`` for every finite ``x >= 0``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

_UNIT_SECONDS: dict[str, int] = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*(?P<unit>ms|s|m|h|d)?")
_EXPECTED = "expected a duration such as 500ms, 10s, 5m, 2h, 3d or a number of seconds"
_EXPECTED_SCHEDULE = "expected comma-separated durations such as 1m,5m,30m,2h"


def parse_duration(text: str) -> float:
    """The number of seconds ``text`` names; a bare number is seconds, negative is refused."""
    value = text.strip()
    if value.startswith("-"):
        raise ValueError(f"expected a duration that is not negative, got {text!r}")
    match = _DURATION.fullmatch(value)
    if match is None:
        raise ValueError(f"{_EXPECTED}, got {text!r}")
    number = float(match["number"])
    unit = match["unit"] or "s"
    # Milliseconds divide rather than multiply by 0.001 so that "3ms" is exactly 3 / 1000.
    seconds = number / 1000 if unit == "ms" else number * _UNIT_SECONDS[unit]
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite duration, got {text!r}")
    return seconds


def parse_schedule(text: str) -> tuple[float, ...]:
    """The delays of a comma-separated schedule such as ``1m,5m,30m``; at least one entry."""
    entries = [entry.strip() for entry in text.split(",")]
    delays: list[float] = []
    for position, entry in enumerate(entries, start=1):
        if not entry:
            raise ValueError(f"{_EXPECTED_SCHEDULE}, got {text!r} (entry {position} is empty)")
        try:
            delays.append(parse_duration(entry))
        except ValueError:
            detail = f"entry {position} is {entry!r}"
            raise ValueError(f"{_EXPECTED_SCHEDULE}, got {text!r} ({detail})") from None
    return tuple(delays)


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it exact: ``7200 -> "2h"``, ``0.5 -> "500ms"``."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a finite number of seconds, not negative, got {seconds!r}")
    if seconds == 0:
        return "0s"
    for unit, size in _UNIT_SECONDS.items():
        count = seconds / size
        if count.is_integer() and count * size == seconds:
            return f"{int(count)}{unit}"
    milliseconds = seconds * 1000
    if seconds < 1 and milliseconds.is_integer() and milliseconds / 1000 == seconds:
        return f"{int(milliseconds)}ms"
    # Positional digits of the shortest repr: exact, and never "1e-05" (not a duration).
    return f"{Decimal(repr(float(seconds))):f}s"
