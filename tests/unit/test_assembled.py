"""``models.assembled``: a frozen dataclass made from its fields without its ``__init__``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from posthaste.core.models import Event, assembled
from posthaste.core.send_request import SendRequest, parse_send_request

FIELDS: dict[str, Any] = {
    "id": "e1",
    "team_id": "t1",
    "type": "email.queued",
    "email_id": "m1",
    "created_at": 1,
    "data": {"a": 1},
}


def test_equal_to_the_same_fields_through_init_and_still_frozen() -> None:
    made = assembled(Event, dict(FIELDS))
    assert made == Event(**FIELDS)
    assert dataclasses.replace(made, type="email.sent").type == "email.sent"
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.type = "email.sent"  # type: ignore[misc]


@pytest.mark.parametrize(
    "values",
    [
        {k: v for k, v in FIELDS.items() if k != "data"},  # a default is not applied
        {**FIELDS, "extra": 1},
        {**{k: v for k, v in FIELDS.items() if k != "data"}, "dta": {}},  # a misspelt name
    ],
)
def test_anything_but_every_field_by_name_is_refused(values: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        assembled(Event, values)


def test_a_parsed_request_equals_one_made_through_init() -> None:
    body = {"from": "a@acme.test", "to": "b@example.com", "subject": "Hi", "text": "Hello"}
    parsed = parse_send_request(body, 0)
    fields = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(SendRequest)}
    assert parsed == SendRequest(**fields)
    assert parsed.recipients() == [("b@example.com", "to")]
