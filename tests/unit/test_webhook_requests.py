"""POST and PATCH /webhooks bodies parsed at the edge, with the API's own messages."""

from typing import Any

import pytest

from posthaste.core.netpolicy import parse_endpoint
from posthaste.core.webhook_requests import (
    NewWebhook,
    WebhookChanges,
    parse_new_webhook,
    parse_webhook_changes,
)
from posthaste.errors import ValidationError

URL = "https://hooks.example.com/in"
NOT_A_URL = "'endpoint' must be an absolute http or https URL, got 'ftp://x/'."
NO_EVENTS = "'events' must be a non-empty array of event types."
BAD_ENABLED = "'enabled' must be true or false."
NO_ENDPOINT = "'endpoint' is required: an absolute http or https URL."


def test_a_new_webhook_keeps_its_events_in_order_once_each_and_starts_enabled() -> None:
    fields = {"endpoint": f" {URL} ", "events": ["email.sent", "email.bounced", "email.sent"]}
    assert parse_new_webhook(fields) == NewWebhook(
        parse_endpoint(URL), ("email.sent", "email.bounced"), enabled=True
    )
    assert not parse_new_webhook({**fields, "enabled": False}).enabled


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"events": 1, "enabled": 1}, NO_ENDPOINT),
        ({"endpoint": "ftp://x/", "events": 1, "enabled": 1}, NOT_A_URL),
        ({"endpoint": URL, "enabled": 1}, NO_EVENTS),
        ({"endpoint": URL, "events": [], "enabled": 1}, NO_EVENTS),
        ({"endpoint": URL, "events": ["email.sent"], "enabled": None}, BAD_ENABLED),
    ],
)
def test_the_first_problem_of_a_new_webhook_is_refused_by_name(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_new_webhook(fields)
    assert refused.value.message == message


def test_changes_hold_only_the_fields_given() -> None:
    assert parse_webhook_changes({}) == WebhookChanges()
    assert parse_webhook_changes({"enabled": False}) == WebhookChanges(enabled=False)
    changes = parse_webhook_changes({"endpoint": URL, "events": ["email.sent"]})
    assert changes == WebhookChanges(parse_endpoint(URL), ("email.sent",), None)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"endpoint": None, "events": None}, NO_ENDPOINT),
        ({"events": None, "enabled": None}, NO_EVENTS),
        ({"events": ["email.sent"], "enabled": None}, BAD_ENABLED),
    ],
)
def test_a_change_given_as_null_is_refused_in_field_order(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_webhook_changes(fields)
    assert refused.value.message == message
