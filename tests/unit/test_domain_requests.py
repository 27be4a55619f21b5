"""POST and PATCH /domains bodies parsed at the edge, with the API's own messages."""

from typing import Any

import pytest

from posthaste.core.domain_requests import (
    DomainChanges,
    NewDomain,
    parse_domain_changes,
    parse_new_domain,
    parse_region,
    parse_settings,
)
from posthaste.core.domains import DomainSettings
from posthaste.errors import ValidationError

REGIONS = ("us-east-1", "eu-west-1")
NOTHING = (
    "Give at least one of open_tracking, click_tracking, tls, receiving, pool, "
    "tracking_subdomain (or Resend's capabilities) to change."
)
BAD_TLS = "'tls' must be one of: opportunistic, enforced."
BAD_REGION = "'region' must be one of: us-east-1, eu-west-1 (see GET /domains/regions)."


def test_regions_default_to_the_first_and_unknown_ones_are_refused() -> None:
    assert parse_region(None, REGIONS) == "us-east-1"
    assert parse_region("eu-west-1", REGIONS) == "eu-west-1"
    with pytest.raises(ValidationError, match="us-east-1, eu-west-1"):
        parse_region("mars-1", REGIONS)


def test_settings_are_checked() -> None:
    assert parse_settings({"tls": "enforced"}, DomainSettings()).tls == "enforced"
    with pytest.raises(ValidationError, match="tls"):
        parse_settings({"tls": "sometimes"}, DomainSettings())
    with pytest.raises(ValidationError, match="open_tracking"):
        parse_settings({"open_tracking": "yes"}, DomainSettings())


def test_a_new_domain_is_normalised_with_default_settings() -> None:
    assert parse_new_domain({"name": "Example.COM."}, REGIONS) == NewDomain(
        "example.com", "us-east-1", DomainSettings()
    )
    fields = {"name": "example.com", "region": "eu-west-1", "tls": "enforced", "receiving": True}
    parsed = parse_new_domain(fields, REGIONS)
    assert parsed.region == "eu-west-1"
    assert parsed.settings == DomainSettings(tls="enforced", receiving=True)
    assert parsed.pool is None
    assert parse_new_domain({"name": "example.com", "pool": "bulk"}, REGIONS).pool == "bulk"
    assert parse_new_domain({"name": "example.com", "pool": None}, REGIONS).pool is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": 3, "region": "mars"}, "'name' must be a domain name string, got number."),
        ({"name": "example.com", "region": "mars", "tls": "x"}, BAD_REGION),
        ({"name": "example.com", "tls": "x", "open_tracking": 1},
         "'open_tracking' must be true or false, got number."),
        ({"name": "example.com", "tls": "x", "receiving": None},
         "'receiving' must be true or false, got null."),
        ({"name": "example.com", "tls": None}, BAD_TLS),
        ({"name": "example.com", "tls": "x", "pool": 3}, BAD_TLS),
        ({"name": "example.com", "pool": 3}, "'pool' must be a pool's name or null, got number."),
    ],
)  # fmt: skip
def test_the_first_problem_of_a_new_domain_is_reported(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_new_domain(fields, REGIONS)
    assert refused.value.message == message


def test_changes_hold_only_the_settings_given_and_apply_over_the_current_ones() -> None:
    changes = parse_domain_changes({"tls": "enforced", "name": "ignored.example"})
    assert changes == DomainChanges(tls="enforced")
    current = DomainSettings(open_tracking=True, receiving=True)
    assert changes.applied_to(current) == DomainSettings(True, False, "enforced", True)
    assert DomainChanges().applied_to(current) == current


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, NOTHING),
        ({"name": "other.example"}, NOTHING),
        ({"tls": None}, BAD_TLS),
        ({"tls": "sometimes", "click_tracking": "y"},
         "'click_tracking' must be true or false, got string."),
        ({"tls": "sometimes", "receiving": False}, BAD_TLS),
    ],
)  # fmt: skip
def test_a_change_left_empty_or_given_as_null_is_refused(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_domain_changes(fields)
    assert refused.value.message == message


def test_resends_capabilities_set_receiving() -> None:
    enabled = {"name": "in.example", "capabilities": {"sending": "enabled", "receiving": "enabled"}}
    assert parse_new_domain(enabled, REGIONS).settings.receiving is True
    assert parse_domain_changes({"capabilities": {"receiving": "disabled"}}) == DomainChanges(
        receiving=False
    )
    assert parse_domain_changes({"capabilities": {}, "tls": "enforced"}).receiving is None
    same = {"receiving": True, "capabilities": {"receiving": "enabled"}}
    assert parse_domain_changes(same).receiving is True


@pytest.mark.parametrize(
    ("capabilities", "message"),
    [
        ("enabled", "'capabilities' must be an object, got string."),
        ({"receiving": True}, "'capabilities.receiving' must be enabled or disabled."),
        ({"receiving": "on"}, "'capabilities.receiving' must be enabled or disabled."),
        ({"sending": "disabled"},
         "'capabilities.sending' can only be 'enabled': every domain sends."),
    ],
)  # fmt: skip
def test_bad_capabilities_are_refused(capabilities: object, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_domain_changes({"capabilities": capabilities})
    assert refused.value.message == message
    with pytest.raises(ValidationError, match="disagree"):
        parse_domain_changes({"receiving": False, "capabilities": {"receiving": "enabled"}})


def test_a_tracking_subdomain_is_one_label_and_null_removes_it() -> None:
    new = parse_new_domain({"name": "acme.test", "tracking_subdomain": "Links"}, REGIONS)
    assert new.settings.tracking_subdomain == "links"
    current = DomainSettings(tracking_subdomain="links")
    assert parse_domain_changes({"tracking_subdomain": "go-1"}).applied_to(current) == (
        DomainSettings(tracking_subdomain="go-1")
    )
    assert parse_domain_changes({"tracking_subdomain": None}).applied_to(current) == (
        DomainSettings()
    )
    assert parse_domain_changes({"tls": "enforced"}).applied_to(current).tracking_subdomain == (
        "links"
    )


@pytest.mark.parametrize(
    "value", ["", "a.b", "-go", "go-", "x" * 64, "li nks", "links\n", "caf\u00e9", 7, ["go"]]
)
def test_a_bad_tracking_subdomain_is_refused(value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_domain_changes({"tracking_subdomain": value})
    assert "'tracking_subdomain' must be" in refused.value.message
