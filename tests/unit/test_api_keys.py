"""POST /api-keys bodies parsed at the edge into a NewApiKey, with the API's own messages."""

from typing import Any

import pytest

from posthaste.core.api_keys import NewApiKey, parse_new_api_key
from posthaste.core.models import KeyMode, Permission
from posthaste.errors import ValidationError


def test_a_body_becomes_a_new_key_with_the_callers_mode_by_default() -> None:
    assert parse_new_api_key({"name": "  ci  "}, KeyMode.TEST) == NewApiKey(
        "ci", KeyMode.TEST, Permission.FULL_ACCESS, None
    )
    parsed = parse_new_api_key(
        {"name": "send", "permission": "sending_access", "mode": "test", "domain_id": "d1"},
        KeyMode.LIVE,
    )
    assert parsed == NewApiKey("send", KeyMode.TEST, Permission.SENDING_ACCESS, "d1")
    assert parse_new_api_key({"name": "n", "mode": None}, KeyMode.TEST).mode is KeyMode.TEST


@pytest.mark.parametrize(
    ("fields", "caller", "message"),
    [
        ({}, KeyMode.LIVE, "'name' is required: 1-200 characters."),
        ({"name": " "}, KeyMode.LIVE, "'name' is required: 1-200 characters."),
        ({"name": "x" * 201}, KeyMode.LIVE, "'name' is required: 1-200 characters."),
        ({"name": 5}, KeyMode.LIVE, "'name' is required: 1-200 characters."),
        (
            {"name": "x", "permission": "all"},
            KeyMode.LIVE,
            "'permission' must be one of: full_access, sending_access.",
        ),
        ({"name": "x", "mode": "prod"}, KeyMode.LIVE, "'mode' must be one of: live, test."),
        # Only a mode left out or null is the caller's (found by schemathesis' coverage phase).
        ({"name": "x", "mode": {}}, KeyMode.LIVE, "'mode' must be one of: live, test."),
        ({"name": "x", "mode": ""}, KeyMode.LIVE, "'mode' must be one of: live, test."),
        (
            {"name": "x", "permission": 1},
            KeyMode.LIVE,
            "'permission' must be one of: full_access, sending_access.",
        ),
        (
            {"name": "x", "mode": "live", "domain_id": 12},
            KeyMode.TEST,
            "A test-mode key can create only test-mode keys.",
        ),
        (
            {"name": "x", "domain_id": 12},
            KeyMode.LIVE,
            "'domain_id' must be the id of one of this team's domains.",
        ),
    ],
)
def test_the_first_problem_is_refused_by_name(
    fields: dict[str, Any], caller: KeyMode, message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_new_api_key(fields, caller)
    assert refused.value.message == message
