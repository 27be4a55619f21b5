"""Cursor encoding: opaque, round-trips, and rejects anything it did not make."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.cursors import (
    InvalidCursor,
    PageRequest,
    Position,
    decode_cursor,
    encode_cursor,
    page_limit,
    page_of,
)
from posthaste.errors import ValidationError

uuids = st.uuids().map(str)


@given(st.integers(min_value=0, max_value=2**62), uuids)
def test_round_trip(created_at: int, row_id: str) -> None:
    position = Position(created_at, row_id)
    cursor = encode_cursor(position)
    assert decode_cursor(cursor) == position
    assert row_id not in cursor  # opaque: the raw id is not readable in the cursor


@given(st.text(max_size=80))
def test_arbitrary_text_is_refused_or_decodes_to_a_valid_position(text: str) -> None:
    try:
        position = decode_cursor(text)
    except InvalidCursor:
        return
    assert position.created_at >= 0
    assert str(uuid.UUID(position.id)) == position.id


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "abc",
        "!!!",
        "MTpub3Q6YQ",
        encode_cursor(Position(1, "0190d4c4-0000-7000-8000-000000000000"))[:-3],
    ],
)
def test_malformed_cursors(bad: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(bad)


def test_cursor_order_matches_position_order() -> None:
    a = Position(5, "00000000-0000-7000-8000-000000000001")
    b = Position(5, "00000000-0000-7000-8000-000000000002")
    assert a < b < Position(6, a.id)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 20),
        ("1", 1),
        ("100", 100),
        ("0", 20),
        ("101", 20),
        ("-5", 20),
        ("abc", 20),
        ("", 20),
    ],
)
def test_page_limit_falls_back_to_default(raw: str | None, expected: int) -> None:
    assert page_limit(raw, 20) == expected


# Resend's paging of a list held whole (an email's attachments)
ITEMS = ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (PageRequest(2), (["a", "b"], True)),
        (PageRequest(5), (ITEMS, False)),
        (PageRequest(9), (ITEMS, False)),
        (PageRequest(2, "b"), (["c", "d"], True)),
        (PageRequest(2, "c"), (["d", "e"], False)),
        (PageRequest(2, "e"), ([], False)),
        (PageRequest(2, "e", backwards=True), (["c", "d"], True)),
        (PageRequest(2, "c", backwards=True), (["a", "b"], False)),
        (PageRequest(2, "a", backwards=True), ([], False)),
    ],
)
def test_page_of_a_whole_list(request_: PageRequest, expected: tuple[list[str], bool]) -> None:
    assert page_of(ITEMS, request_, lambda item: item, "letters") == expected


def test_page_of_refuses_an_anchor_not_in_the_list() -> None:
    with pytest.raises(ValidationError, match="'before' must be the id of one of the letters"):
        page_of(ITEMS, PageRequest(2, "z", backwards=True), lambda item: item, "letters")
