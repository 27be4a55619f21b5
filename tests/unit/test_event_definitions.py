"""Event definitions (pure): the schema a defined event carries, and the payloads it allows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.event_definitions import (
    EventDefinition,
    check_payload,
    parse_new_event_definition,
    parse_schema,
    parse_schema_change,
)
from posthaste.errors import ValidationError

SCHEMA = {"plan": "string", "seats": "number", "trial": "boolean", "renews": "date"}
DEFINED = EventDefinition("id", "team", "order.paid", SCHEMA, 0, 0)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def test_a_definition_reads_its_name_and_schema() -> None:
    new = parse_new_event_definition({"name": "order.paid", "schema": SCHEMA, "other": 1})
    assert (new.name, new.schema) == ("order.paid", SCHEMA)
    assert parse_new_event_definition({"name": "signup"}).schema is None
    assert parse_schema_change({"schema": None}) is None
    assert parse_schema_change({"schema": {"plan": "string"}}) == {"plan": "string"}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("flat", "must be an object"),
        ({"plan": "str"}, "'schema.plan'"),
        ({"plan": None}, "'schema.plan'"),
        ({"plan": {"nested": "string"}}, "flat"),
        ({"bad\nname": "string"}, "field names"),
        ({f"f{n}": "string" for n in range(101)}, "at most 100 fields"),
    ],
)
def test_schemas_that_cannot_be(value: object, named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        parse_schema(value)


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"plan": "pro", "seats": 3, "trial": True, "renews": "2026-12-01"},
        {"seats": 0.5, "renews": "2026-12-01T10:00:00Z"},
        {"renews": "2026-12-01T10:00:00.123+02:00"},
        {"plan": None, "seats": None},
        {"unnamed": [1, {"x": None}]},
    ],
)
def test_payloads_the_schema_allows(payload: dict[str, Any]) -> None:
    check_payload(DEFINED, payload)


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"plan": 1}, "'payload.plan' must be a string, got number"),
        ({"seats": "3"}, "'payload.seats' must be a number, got '3'"),
        ({"seats": False}, "'payload.seats' must be a number, got boolean"),
        ({"trial": "true"}, "'payload.trial' must be a boolean"),
        ({"trial": 1}, "'payload.trial' must be a boolean"),
        ({"renews": "2026-13-01"}, "'payload.renews' must be a date"),
        ({"renews": "soon"}, "'payload.renews' must be a date"),
        ({"renews": 1764547200}, "'payload.renews' must be a date"),
        ({"plan": {"name": "pro"}}, "got object"),
    ],
)
def test_payloads_the_schema_refuses(payload: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError) as raised:
        check_payload(DEFINED, payload)
    assert named in raised.value.message and "'order.paid'" in raised.value.message


@given(st.dictionaries(st.text(max_size=10), json_values, max_size=5))
def test_no_schema_takes_any_payload(payload: dict[str, Any]) -> None:
    check_payload(EventDefinition("id", "team", "any", None, 0, 0), payload)


@given(st.datetimes(timezones=st.just(UTC)))
def test_every_rfc3339_time_and_date_is_a_date(moment: datetime) -> None:
    check_payload(DEFINED, {"renews": moment.isoformat().replace("+00:00", "Z")})
    check_payload(DEFINED, {"renews": moment.date().isoformat()})
