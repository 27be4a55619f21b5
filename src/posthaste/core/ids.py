"""Identifiers and timestamps: time-ordered UUIDv7 ids and millisecond UTC clocks."""

from __future__ import annotations

import functools
import time
import uuid
from datetime import UTC, datetime, timedelta

import uuid_utils

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def new_id() -> str:
    """A time-ordered UUIDv7 as its canonical string; sorts by creation time."""
    return str(uuid_utils.uuid7())


def id_floor(ms: int) -> str:
    """The smallest UUIDv7 minted at ``ms``: every id made before that millisecond sorts below
    it, every id made from it on sorts at or above (the retention purge's range bound)."""
    stamp = f"{max(ms, 0):012x}"[-12:]
    return f"{stamp[:8]}-{stamp[8:]}-7000-8000-000000000000"


def is_uuid(value: str) -> bool:
    """True when ``value`` is a canonical UUID string (any version)."""
    try:
        return str(uuid.UUID(value)) == value.lower() and len(value) == 36
    except ValueError:
        return False


def now_ms() -> int:
    """Milliseconds since the Unix epoch, UTC; every stored timestamp uses this unit."""
    return time.time_ns() // 1_000_000


def format_ms(ms: int | None) -> str | None:
    """RFC 3339 UTC with milliseconds and ``Z``, or None."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a second (events of one second share it: strftime is slow)."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_rfc3339(value: str) -> int:
    """An RFC 3339 timestamp (offset or ``Z`` required) to epoch milliseconds.

    Raises ValueError for naive or malformed timestamps: a time without a zone is ambiguous.
    """
    text = value.strip()
    if text.endswith(("z", "Z")):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        raise ValueError("timestamp has no time zone offset")
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
