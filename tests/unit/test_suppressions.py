"""POST /suppressions bodies and the GET origin filter, parsed at the edge."""

import pytest

from posthaste.core.suppressions import (
    parse_removal_refs,
    parse_suppressed_address,
    parse_suppression_body,
    parse_suppression_origin,
)
from posthaste.errors import ValidationError


def test_an_address_to_suppress_is_parsed_and_keyed_in_lower_case() -> None:
    assert parse_suppressed_address("Ann <Ann@Example.COM>").lookup_key == "ann@example.com"
    assert parse_suppressed_address("Ü@Bücher.de").lookup_key == "ü@xn--bcher-kva.de"


@pytest.mark.parametrize("value", [None, 5, ["a@example.com"]])
def test_a_missing_address_is_refused_by_name(value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_suppressed_address(value)
    assert refused.value.message == "'email' is required: the address to suppress."


def test_an_invalid_address_is_refused_by_the_address_parser() -> None:
    with pytest.raises(ValidationError) as refused:
        parse_suppressed_address("not an address")
    assert "'email'" in refused.value.message


def test_the_origin_filter_is_one_of_the_origins_or_none() -> None:
    assert [parse_suppression_origin(o) for o in ("bounce", "complaint", "manual", None)] == [
        "bounce",
        "complaint",
        "manual",
        None,
    ]
    with pytest.raises(ValidationError) as refused:
        parse_suppression_origin("other")
    assert refused.value.message == "'origin' must be one of bounce, complaint, manual."


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"email": {}, "emails": ["a@example.com"]}, "Give 'email' or 'emails', not both."),
        ({"emails": ["a@example.com"], "ids": None}, "Give 'emails' or 'ids'"),
        ({"ids": None}, "'ids' must be a non-empty list"),
    ],
)
def test_a_body_naming_both_forms_or_a_null_list_is_refused(
    body: dict[str, object], message: str
) -> None:
    parse = parse_removal_refs if "ids" in body else parse_suppression_body
    with pytest.raises(ValidationError) as refused:
        parse(body)
    assert refused.value.message.startswith(message)
