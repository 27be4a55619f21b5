"""Durations and schedules: parsing operator text, formatting seconds back."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.durations import format_duration, parse_duration, parse_schedule


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("3ms", 0.003),
        ("10s", 10.0),
        ("1m", 60.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("3d", 259_200.0),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("10", 10.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("0s", 0.0),
        ("  5m  ", 300.0),
        ("5 m", 300.0),
    ],
)
def test_parse_duration_reads_units_and_bare_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "   ", "5x", "h", "ms", "5M", "1e3", "1.", "5m30s", "five", "٣s", "nan", "inf"]
)
def test_parse_duration_refuses_other_forms_naming_them(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration such as") as caught:
        parse_duration(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize("text", ["-5s", "-1", " -0.5m"])
def test_parse_duration_refuses_negative(text: str) -> None:
    with pytest.raises(ValueError, match="not negative"):
        parse_duration(text)


def test_parse_duration_refuses_overflow_to_infinity() -> None:
    with pytest.raises(ValueError, match="finite"):
        parse_duration("9" * 400 + "d")


def test_parse_schedule_reads_each_entry_in_order() -> None:
    assert parse_schedule("1m,5m,30m,2h") == (60.0, 300.0, 1800.0, 7200.0)


def test_parse_schedule_tolerates_spaces_and_single_entry() -> None:
    assert parse_schedule(" 1m , 500ms ,2h ") == (60.0, 0.5, 7200.0)
    assert parse_schedule("10s") == (10.0,)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "entry 1 is empty"),
        ("1m,,5m", "entry 2 is empty"),
        ("1m,5m,", "entry 3 is empty"),
        ("1m,5x", "entry 2 is '5x'"),
        ("-1m", "entry 1 is '-1m'"),
    ],
)
def test_parse_schedule_names_the_bad_entry(text: str, detail: str) -> None:
    with pytest.raises(ValueError, match="comma-separated durations") as caught:
        parse_schedule(text)
    assert detail in str(caught.value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (0.003, "3ms"),
        (1, "1s"),
        (1.5, "1.5s"),
        (90, "90s"),
        (60, "1m"),
        (5400, "90m"),
        (7200, "2h"),
        (86_400, "1d"),
        (259_200, "3d"),
        (1e-05, "0.00001s"),
    ],
)
def test_format_duration_uses_the_largest_exact_unit(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf])
def test_format_duration_refuses_negative_and_non_finite(seconds: float) -> None:
    with pytest.raises(ValueError, match="expected a finite number of seconds"):
        format_duration(seconds)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_format_then_parse_round_trips_floats(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.integers(min_value=0, max_value=10**9))
def test_format_then_parse_round_trips_milliseconds(milliseconds: int) -> None:
    seconds = milliseconds / 1000
    text = format_duration(seconds)
    assert parse_duration(text) == seconds
    assert "e" not in text
