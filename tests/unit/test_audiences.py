"""Contacts, segments and topics as callers give them: the edge parsers (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from posthaste.core.contacts import (
    Contact,
    contact_ref_key,
    parse_contact_changes,
    parse_new_contact,
    parse_segment_refs,
)
from posthaste.core.ids import new_id
from posthaste.core.segments import parse_segment_name
from posthaste.core.topics import (
    Topic,
    TopicChoice,
    effective_subscription,
    parse_new_topic,
    parse_topic_changes,
    parse_topic_choices,
)
from posthaste.errors import ValidationError

T0 = 1_767_225_600_000


def contact(**overrides: Any) -> Contact:
    values: dict[str, Any] = {
        "id": new_id(), "team_id": new_id(), "email": "ann@example.com",
        "email_key": "ann@example.com", "first_name": "Ann", "last_name": None,
        "unsubscribed": False, "properties": {"plan": "pro", "seats": 3},
        "created_at": T0, "updated_at": T0,
    }  # fmt: skip
    return Contact(**{**values, **overrides})


def test_a_new_contact_keeps_the_address_with_an_ascii_domain_and_a_lower_case_key() -> None:
    new = parse_new_contact({"email": " Ann@Bücher.Example ", "first_name": "  Ann "})
    assert new.address.address == "Ann@xn--bcher-kva.example"
    assert new.address.lookup_key == "ann@xn--bcher-kva.example"
    assert new.first_name == "Ann" and new.last_name is None and new.unsubscribed is False
    assert new.properties == {} and new.segment_ids == () and new.topics == ()


def test_segments_accept_ids_and_resend_objects_once_each() -> None:
    one, two = new_id(), new_id()
    assert parse_segment_refs([one, {"id": two.upper()}, one]) == (one, two)
    for bad in ("x", [1], [{"name": "x"}], ["not-a-uuid"], [new_id() for _ in range(101)]):
        with pytest.raises(ValidationError):
            parse_segment_refs(bad)


def test_properties_on_create_keep_strings_and_numbers() -> None:
    new = parse_new_contact(
        {"email": "a@example.com", "properties": {"plan": "pro", "n": 2, "x": 0.5}}
    )
    assert new.properties == {"plan": "pro", "n": 2, "x": 0.5}


@pytest.mark.parametrize(
    "props",
    [
        {"a": True},
        # null removes a key in a PATCH; on create it is refused (docs/audiences.md), not dropped
        {"a": None},
        {"a": [1]},
        {"a": {"b": 1}},
        {"a": "x" * 2001},
        {"": "x"},
        {"1st": "x"},
        {"a b": "x"},
        {"a.b": "x"},
        {"k" * 65: "x"},
        {f"k{i}": i for i in range(51)},
        {"a": float("inf")},
    ],
)
def test_properties_refused(props: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_new_contact({"email": "a@example.com", "properties": props})


def test_changes_merge_properties_and_move_updated_at_only_when_something_changed() -> None:
    current = contact()
    same = parse_contact_changes({"first_name": "Ann", "properties": {"plan": "pro"}})
    assert same.applied_to(current, T0 + 5) is current
    changed = parse_contact_changes(
        {"last_name": "Lee", "properties": {"plan": None, "city": "Oslo"}, "id": "ignored"}
    ).applied_to(current, T0 + 5)
    assert changed.last_name == "Lee" and changed.first_name == "Ann"
    assert changed.properties == {"seats": 3, "city": "Oslo"} and changed.updated_at == T0 + 5
    cleared = parse_contact_changes({"properties": None}).applied_to(current, T0 + 6)
    assert cleared.properties == {}
    moved = parse_contact_changes({"email": "New@Example.com"}).applied_to(current, T0 + 7)
    assert (moved.email, moved.email_key) == ("New@example.com", "new@example.com")


@pytest.mark.parametrize(
    "body",
    [
        {"email": "Ann <ann@example.com>"},
        {"email": "<ann@example.com>"},
        {"email": None},
        {"first_name": "a\nb"},
        {"last_name": "\u2028"},
        {"unsubscribed": 1},
        {"properties": "plan=pro"},
    ],
)
def test_bad_changes_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_contact_changes(body)


def test_a_path_names_an_id_or_an_address_or_nothing() -> None:
    some = new_id()
    assert contact_ref_key(some.upper()) == ("id", some)
    assert contact_ref_key("ANN@Example.com") == ("email", "ann@example.com")
    assert contact_ref_key("not an address") is None


def test_segment_names() -> None:
    assert parse_segment_name("  VIP ") == "VIP"
    for bad in (None, "", " ", 3, "x" * 201):
        with pytest.raises(ValidationError):
            parse_segment_name(bad)


def test_topics_and_choices() -> None:
    new = parse_new_topic({"name": " News ", "default_subscription": "opt_out"})
    assert (new.name, new.description, new.default_subscription) == ("News", None, "opt_out")
    assert parse_topic_changes({"description": None}).description is None
    with pytest.raises(ValidationError):
        parse_topic_changes({"default_subscription": "opt_in"})
    one = new_id()
    choices = parse_topic_choices(
        [{"id": one, "subscription": "opt_in"}, {"id": one.upper(), "subscription": "opt_out"}],
        "topics",
    )
    assert choices == [TopicChoice(one, "opt_out")]
    for bad in (None, {}, [{"id": one}], [{"id": "x", "subscription": "opt_in"}], [one]):
        with pytest.raises(ValidationError):
            parse_topic_choices(bad, "topics")


def test_the_effective_subscription_is_the_choice_else_the_default() -> None:
    topic = Topic(new_id(), new_id(), "News", None, "opt_in", T0, T0)
    assert effective_subscription(topic, None) == "opt_in"
    assert effective_subscription(topic, "opt_out") == "opt_out"
