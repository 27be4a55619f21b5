from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.ids import format_ms, parse_rfc3339


def test_format_ms_is_rfc3339_utc_with_milliseconds() -> None:
    assert format_ms(0) == "1970-01-01T00:00:00.000Z"
    assert format_ms(1_763_900_000_123) == "2025-11-23T12:13:20.123Z"
    assert format_ms(1_763_900_000_999) == "2025-11-23T12:13:20.999Z"
    assert format_ms(None) is None


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_format_ms_matches_datetime_and_round_trips(ms: int) -> None:
    expected = datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert format_ms(ms) == f"{expected}.{ms % 1000:03d}Z"
    assert parse_rfc3339(format_ms(ms) or "") == ms
