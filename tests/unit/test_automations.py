"""Automation graphs (pure): what a valid graph is, and the decisions a run's steps make."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.automation_runs import (
    Run,
    RunStatus,
    RunStep,
    StepStatus,
    condition_met,
    in_path_order,
    message_data,
    parse_custom_event,
)
from posthaste.core.automations import (
    ConnectionType,
    graph_from_record,
    graph_record,
    parse_graph,
)
from posthaste.core.contacts import Contact
from posthaste.errors import ValidationError

TRIGGER = {"key": "t", "type": "trigger", "config": {"event": "contact.created"}}


def delay(key: str) -> dict[str, Any]:
    return {"key": key, "type": "delay", "config": {"duration": "1m"}}


def contact(**fields: Any) -> Contact:
    values: dict[str, Any] = {
        "id": "c1", "team_id": "t1", "email": "ann@example.com", "email_key": "ann@example.com",
        "first_name": None, "last_name": None, "unsubscribed": False, "properties": {},
        "created_at": 0, "updated_at": 0,
    }  # fmt: skip
    return Contact(**(values | fields))


def test_a_chain_parses_and_round_trips_through_its_record() -> None:
    graph = parse_graph([TRIGGER, delay("a"), delay("b")], [
        {"from": "t", "to": "a"}, {"from": "a", "to": "b", "type": "default"},
    ])  # fmt: skip
    assert graph.trigger_event == "contact.created"
    assert graph.after("t", ConnectionType.DEFAULT) == "a"
    assert graph.after("b", ConnectionType.DEFAULT) is None
    assert graph_from_record(graph_record(graph)) == graph


def test_branches_may_merge_again() -> None:
    condition = {
        "key": "c",
        "type": "condition",
        "config": {"field": "event.x", "operator": "exists"},
    }
    graph = parse_graph(
        [TRIGGER, condition, delay("yes"), delay("no"), delay("end")],
        [
            {"from": "t", "to": "c"},
            {"from": "c", "to": "yes", "type": "condition_met"},
            {"from": "c", "to": "no", "type": "condition_not_met"},
            {"from": "yes", "to": "end"},
            {"from": "no", "to": "end"},
        ],
    )
    assert graph.after("c", ConnectionType.CONDITION_NOT_MET) == "no"


@given(st.integers(min_value=1, max_value=12), st.data())
def test_every_chain_is_valid_and_every_way_back_is_a_cycle(
    count: int, data: st.DataObject
) -> None:
    steps = [TRIGGER, *(delay(f"s{i}") for i in range(count))]
    keys = [s["key"] for s in steps]
    links = [{"from": a, "to": b} for a, b in pairwise(keys)]
    parse_graph(steps, links)
    back_to = data.draw(st.sampled_from(keys[1:]))
    with pytest.raises(ValidationError, match="cycle"):
        parse_graph(steps, [*links, {"from": keys[-1], "to": back_to}])


@given(st.permutations(range(8)))
def test_steps_executed_in_one_millisecond_sort_along_their_path(order: list[int]) -> None:
    """A chain declared in any order: the steps a run executed at the same instant come back
    in the order of the chain, whatever order they were read in."""
    keys = [f"s{i}" for i in range(8)]
    steps = [TRIGGER, *(delay(keys[i]) for i in order)]
    links = [{"from": a, "to": b} for a, b in pairwise(["t", *keys])]
    graph = parse_graph(steps, links)
    done = [RunStep("r", key, "delay", StepStatus.COMPLETED, 5, 5) for key in reversed(keys)]
    run = Run("r", "t1", "a", "v", "c", RunStatus.RUNNING, None, {}, None, 0, steps=tuple(done))
    assert [s.key for s in in_path_order(run, graph).steps] == keys


@given(st.permutations(range(6)), st.integers(min_value=0, max_value=5))
def test_a_step_cut_off_is_named_as_unreachable(order: list[int], cut: int) -> None:
    steps = [TRIGGER, *(delay(f"s{i}") for i in order)]
    keys = ["t", *(f"s{i}" for i in order)]
    links = [{"from": a, "to": b} for a, b in pairwise(keys)]
    del links[cut]
    with pytest.raises(ValidationError, match=f"Step '{keys[cut + 1]}' is not reachable"):
        parse_graph(steps, links)


@pytest.mark.parametrize(
    ("field", "operator", "value", "expected"),
    [
        ("contact.properties.plan", "eq", "pro", True),
        ("contact.properties.plan", "neq", "pro", False),
        ("contact.properties.seats", "gt", 10, True),
        ("contact.properties.seats", "lt", "100", True),
        ("contact.properties.seats", "eq", 25.0, True),
        ("contact.properties.missing", "neq", "x", True),
        ("contact.properties.missing", "gt", 1, False),
        ("contact.properties.missing", "exists", None, False),
        ("contact.first_name", "exists", None, True),
        ("contact.email", "contains", "@example.", True),
        ("contact.unsubscribed", "eq", False, True),
        ("event.tags", "contains", "vip", True),
        ("event.order.total", "gt", 99.5, True),
        ("event.when", "lt", "2027-01-01", True),
        ("event.order.total", "lt", "abc", True),  # no number: compared as text
        ("contact.properties.seats", "gte", 25, True),
        ("contact.properties.seats", "lte", 24, False),
        ("contact.email", "starts_with", "ann@", True),
        ("contact.email", "ends_with", ".org", False),
        ("contact.last_name", "is_empty", None, True),
        ("event.tags", "is_empty", None, False),
    ],
)
def test_conditions(field: str, operator: str, value: Any, expected: bool) -> None:
    config = {"field": field, "operator": operator}
    if value is not None:
        config["value"] = value
    who = contact(first_name="Ann", properties={"plan": "pro", "seats": 25})
    event = {"tags": ["vip", "beta"], "order": {"total": 120}, "when": "2026-11-26"}
    assert condition_met(config, who, event) is expected


def test_and_or_rules_combine() -> None:
    who = contact(properties={"plan": "pro", "seats": 3})
    pro = {"type": "rule", "field": "contact.properties.plan", "operator": "eq", "value": "pro"}
    big = {"field": "contact.properties.seats", "operator": "gt", "value": 10}
    assert condition_met({"type": "or", "rules": [pro, big]}, who, {}) is True
    assert condition_met({"type": "and", "rules": [pro, big]}, who, {}) is False


def test_resend_config_names_are_read() -> None:
    graph = parse_graph(
        [
            {"key": "t", "type": "trigger", "config": {"event_name": "signed.up"}},
            {"key": "w", "type": "wait_for_event", "config": {"event_name": "paid"}},
            {
                "key": "m",
                "type": "send_email",
                "config": {
                    "from": "a@acme.test",
                    "template": {"id": "welcome", "variables": {"x": 1}},
                },
            },
        ],
        [{"from": "t", "to": "w"}, {"from": "w", "to": "m", "type": "event_received"}],
    )
    assert graph.trigger_event == "signed.up"
    assert graph.steps[1].config == {"event": "paid", "timeout": "365d"}
    assert graph.steps[2].config == {"from": "a@acme.test", "template": "welcome", "data": {"x": 1}}


def test_message_data_keeps_fallbacks_for_templates_and_empties_inline_fields() -> None:
    who = contact(properties={"plan": "pro"})
    templated = message_data({"x": 1}, who, {"a": 2}, templated=True)
    assert "first_name" not in templated["contact"] and templated["event"] == {"a": 2}
    assert templated["x"] == 1 and templated["contact"]["properties"] == {"plan": "pro"}
    assert message_data({}, who, {}, templated=False)["contact"]["first_name"] == ""


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"email": "a@b.test"}, "'event'"),
        ({"event": "email.sent", "email": "a@b.test"}, "reserved"),
        ({"event": "x", "email": "a@b.test", "contact_id": "c"}, "exactly one"),
        ({"event": "x", "contact_id": "c"}, "'contact_id'"),
        ({"event": "x", "email": "A <a@b.test>"}, "bare address"),
        ({"event": "x", "email": "a@b.test", "payload": {"k": "v" * 70_000}}, "64 KiB"),
    ],
)
def test_bad_custom_events(body: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        parse_custom_event(body)
