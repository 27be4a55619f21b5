"""POST and PATCH /streams bodies parsed at the edge, with the API's own messages."""

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.streams import (
    DEFAULT_STREAM_IDS,
    NewStream,
    parse_new_stream,
    parse_stream_name,
)
from posthaste.errors import ValidationError

SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
BAD_SLUG = "'id' must be a slug: lowercase letters, digits, '-' and '_', at most 64 characters."


def test_a_stream_gets_its_id_from_the_body_or_from_its_name() -> None:
    given_id = parse_new_stream({"id": "news", "name": " News ", "type": "broadcast"})
    assert given_id == NewStream("news", "News", "broadcast")
    derived = parse_new_stream({"name": "Product Updates!", "type": "transactional"})
    assert derived == NewStream("product-updates", "Product Updates!", "transactional")
    assert {"transactional", "broadcast"} == DEFAULT_STREAM_IDS


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"type": "broadcast"}, "'name' is required: 1-200 characters."),
        ({"name": "  ", "type": "broadcast"}, "'name' is required: 1-200 characters."),
        ({"name": "x" * 201, "type": "broadcast"}, "'name' is required: 1-200 characters."),
        ({"name": "x"}, "'type' must be 'transactional' or 'broadcast'."),
        ({"name": "x", "type": ["broadcast"]}, "'type' must be 'transactional' or 'broadcast'."),
        ({"name": "x", "type": "broadcast", "id": "Bad Id"}, BAD_SLUG),
        ({"name": "x", "type": "broadcast", "id": 7}, BAD_SLUG),
        ({"name": "x", "type": "broadcast", "id": "news\n"}, BAD_SLUG),  # "$" matches before it
        ({"name": "!!!", "type": "broadcast"}, BAD_SLUG),
    ],
)
def test_the_first_problem_is_refused_by_name(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_new_stream(fields)
    assert refused.value.message == message


@given(st.text(max_size=250))
def test_a_derived_id_is_always_a_slug(name: str) -> None:
    try:
        parsed = parse_new_stream({"name": name, "type": "broadcast"})
    except ValidationError:
        return
    assert SLUG.fullmatch(parsed.id) and parsed.name == name.strip()


def test_a_new_name_is_trimmed_or_refused() -> None:
    assert parse_stream_name("  Updates ") == "Updates"
    for value in (None, "", " ", "x" * 201, 3):
        with pytest.raises(ValidationError) as refused:
            parse_stream_name(value)
        assert refused.value.message == "'name' must be 1-200 characters."
