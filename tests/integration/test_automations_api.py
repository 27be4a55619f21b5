"""/automations: create, read, list, edit (versions), duplicate, stop, delete, and the 422s of a
graph that cannot run; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from posthaste.bootstrap import Services
from tests.conftest import Tenant, make_tenant

SEGMENT_ID = "01900000-0000-7000-8000-000000000000"


async def segment(client: httpx.AsyncClient, tenant: Tenant) -> str:
    response = await client.post("/segments", json={"name": "Onboarded"}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def graph(segment_id: str, **trigger: Any) -> dict[str, Any]:
    """trigger → delay → send_email → add_to_segment."""
    return {
        "steps": [
            {"key": "start", "type": "trigger", "config": {"event": "contact.created", **trigger}},
            {"key": "wait", "type": "delay", "config": {"duration": "2h"}},
            {
                "key": "welcome",
                "type": "send_email",
                "config": {
                    "from": "hello@acme.test",
                    "subject": "Hi {{contact.first_name}}",
                    "html": "<p>Welcome</p>",
                },
            },
            {"key": "tag", "type": "add_to_segment", "config": {"segment_id": segment_id}},
        ],
        "connections": [
            {"from": "start", "to": "wait"},
            {"from": "wait", "to": "welcome", "type": "default"},
            {"from": "welcome", "to": "tag"},
        ],
    }


async def create(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/automations", json=body, headers=tenant.headers())


async def test_create_get_list_edit_duplicate_stop_delete(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    segment_id = await segment(client, tenant)
    created = await create(client, tenant, {"name": " Welcome ", **graph(segment_id)})
    assert created.status_code == 201, created.text
    record = created.json()
    assert record["object"] == "automation" and record["name"] == "Welcome"
    assert record["status"] == "disabled"  # Resend's default
    assert [s["key"] for s in record["steps"]] == ["start", "wait", "welcome", "tag"]
    assert record["connections"][0] == {"from": "start", "to": "wait", "type": "default"}
    path = f"/automations/{record['id']}"
    assert (await client.get(path, headers=tenant.headers())).json() == record

    enabled = await client.patch(path, json={"status": "enabled"}, headers=tenant.headers())
    assert enabled.status_code == 200 and enabled.json()["status"] == "enabled"
    assert enabled.json()["steps"] == record["steps"]
    shorter = {
        "steps": [record["steps"][0], record["steps"][3]],
        "connections": [{"from": "start", "to": "tag"}],
    }
    edited = await client.patch(path, json=shorter, headers=tenant.headers())
    assert [s["key"] for s in edited.json()["steps"]] == ["start", "tag"]

    copy = await client.post(f"{path}/duplicate", headers=tenant.headers())
    assert copy.status_code == 201
    assert copy.json()["name"] == "Welcome (copy)" and copy.json()["status"] == "disabled"
    assert copy.json()["steps"] == edited.json()["steps"] and copy.json()["id"] != record["id"]

    listed = await client.get("/automations", headers=tenant.headers())
    assert [a["id"] for a in listed.json()["data"]] == [record["id"], copy.json()["id"]]
    only_enabled = await client.get("/automations?status=enabled", headers=tenant.headers())
    assert [a["id"] for a in only_enabled.json()["data"]] == [record["id"]]
    paged = await client.get("/automations?limit=1", headers=tenant.headers())
    assert paged.json()["has_more"] is True and len(paged.json()["data"]) == 1

    stopped = await client.post(f"{path}/stop", headers=tenant.headers())
    assert stopped.status_code == 200 and stopped.json()["status"] == "disabled"
    gone = await client.delete(path, headers=tenant.headers())
    assert gone.json() == {"object": "automation", "id": record["id"], "deleted": True}
    assert (await client.get(path, headers=tenant.headers())).status_code == 404


async def test_another_team_sees_none_of_it(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    created = await create(client, tenant, {"name": "Mine", **graph(await segment(client, tenant))})
    other = await make_tenant(services)
    path = f"/automations/{created.json()['id']}"
    for method in ("GET", "DELETE"):
        response = await client.request(method, path, headers=other.headers())
        assert response.status_code == 404
    assert (await client.get("/automations", headers=other.headers())).json()["data"] == []
    assert (await client.get(f"{path}/runs", headers=other.headers())).status_code == 404


def broken(segment_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(what the message names, a body with that one problem)."""
    good = graph(segment_id)
    steps, links = good["steps"], good["connections"]

    def with_steps(*changed: dict[str, Any], drop: int | None = None) -> dict[str, Any]:
        kept = [s for i, s in enumerate(steps) if i != drop]
        by_key = {s["key"]: s for s in kept} | {s["key"]: s for s in changed}
        return {"name": "x", "steps": list(by_key.values()), "connections": links}

    def step(key: str, type_: str, **config: Any) -> dict[str, Any]:
        return {"key": key, "type": type_, "config": config}

    return [
        ("exactly one 'trigger'", with_steps(drop=0) | {"connections": links[1:]}),
        (
            "exactly one 'trigger'",
            with_steps(step("wait", "trigger", event="contact.created")) | {"connections": []},
        ),
        ("not reachable", {**with_steps(), "connections": links[:2]}),
        ("cycle", {**with_steps(), "connections": [*links, {"from": "tag", "to": "wait"}]}),
        ("must be one of", with_steps(step("tag", "teleport"))),
        ("'duration'", with_steps(step("wait", "delay", duration="soon"))),
        ("'duration'", with_steps(step("wait", "delay"))),
        (
            "not one of your segments",
            with_steps(step("tag", "add_to_segment", segment_id=SEGMENT_ID)),
        ),
        (
            "template 'nope' was not found",
            with_steps(
                step("welcome", "send_email", **{"from": "a@acme.test", "template": "nope"})
            ),
        ),
        ("'from'", with_steps(step("welcome", "send_email", subject="Hi", html="x"))),
        (
            "'subject'",
            with_steps(step("welcome", "send_email", **{"from": "a@acme.test", "html": "x"})),
        ),
        (
            "leads on with 'default'",
            {
                **with_steps(),
                "connections": [*links[:2], {"from": "welcome", "to": "tag", "type": "timeout"}],
            },
        ),
        (
            "'condition_met' or 'condition_not_met'",
            {
                **with_steps(
                    step(
                        "welcome",
                        "condition",
                        field="contact.properties.plan",
                        operator="eq",
                        value="pro",
                    )
                ),
                "connections": links,
            },
        ),
        (
            "'operator'",
            with_steps(
                step("welcome", "condition", field="contact.email", operator="like", value="x")
            ),
        ),
        (
            "'field'",
            with_steps(step("welcome", "condition", field="plan", operator="eq", value="x")),
        ),
        ("'timeout'", with_steps(step("wait", "wait_for_event", event="paid", timeout="soon"))),
        ("reserved", with_steps(step("wait", "wait_for_event", event="email.sent", timeout="1d"))),
        (
            "already has a 'default'",
            {**with_steps(), "connections": [*links, {"from": "start", "to": "tag"}]},
        ),
        (
            "nothing may lead into the trigger",
            {**with_steps(), "connections": [*links, {"from": "tag", "to": "start"}]},
        ),
        (
            "'connections[3].to'",
            {**with_steps(), "connections": [*links, {"from": "tag", "to": "ghost"}]},
        ),
        ("used by another step", {**with_steps(), "steps": [*steps, steps[1]]}),
        ("'name'", {**with_steps(), "name": ""}),
        ("'status'", {**with_steps(), "status": "on"}),
        ("'email' cannot be changed", with_steps(step("tag", "contact_update", email="b@x.test"))),
    ]


async def test_graphs_that_cannot_run_are_422_naming_the_problem(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    for named, body in broken(await segment(client, tenant)):
        response = await create(client, tenant, body)
        assert response.status_code == 422, (named, response.text)
        assert response.json()["name"] == "validation_error"
        assert named in response.json()["message"], (named, response.json()["message"])
    assert (await client.get("/automations", headers=tenant.headers())).json()["data"] == []


async def test_a_bad_edit_changes_nothing(client: httpx.AsyncClient, tenant: Tenant) -> None:
    created = (
        await create(client, tenant, {"name": "A", **graph(await segment(client, tenant))})
    ).json()
    path = f"/automations/{created['id']}"
    bad = {"steps": created["steps"], "connections": created["connections"][:1]}
    response = await client.patch(path, json=bad, headers=tenant.headers())
    assert response.status_code == 422 and "not reachable" in response.json()["message"]
    only_links = await client.patch(path, json={"connections": []}, headers=tenant.headers())
    assert only_links.status_code == 422
    assert (await client.get(path, headers=tenant.headers())).json() == created


@pytest.mark.parametrize("body", [[], "x", {"name": "x"}, {"name": "x", "steps": []}])
async def test_bodies_that_are_no_graph_are_422(
    client: httpx.AsyncClient, tenant: Tenant, body: Any
) -> None:
    response = await client.post("/automations", json=body, headers=tenant.headers())
    assert response.status_code == 422


# The rules a JSON schema cannot state: they stay 422s, described in words (keys and steps are
# data: which exist, how they connect).
UNSTATABLE = (
    "exactly one 'trigger'",
    "not reachable",
    "cycle",
    "not one of your segments",
    "was not found",
    "leads on with",
    "'condition_met' or 'condition_not_met'",
    "already has a",
    "nothing may lead into",
    "'connections[3].to'",
    "used by another step",
)


async def test_the_document_refuses_every_graph_rule_it_can_state(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    """/openapi.json accepts the graphs the API accepts, and refuses each broken one but for the
    rules a schema cannot state (schemathesis checks the rest: tests/e2e/test_fuzz_api.py)."""
    document = (await client.get("/openapi.json")).json()
    schema = {"$ref": "#/components/schemas/CreateAutomationRequest"}
    root = {**schema, "components": document["components"]}
    segment_id = await segment(client, tenant)
    for good in ({"name": "A", **graph(segment_id)}, every_step_type(segment_id)):
        assert list(Draft202012Validator(root).iter_errors(good)) == [], good
        assert (await create(client, tenant, good)).status_code == 201
    for named, body in broken(segment_id):
        refused = list(Draft202012Validator(root).iter_errors(body))
        assert (refused == []) == any(rule in named for rule in UNSTATABLE), (named, body)


def every_step_type(segment_id: str) -> dict[str, Any]:
    rule = {"field": "event.plan", "operator": "eq", "value": "pro"}
    nested = {"type": "or", "rules": [{"field": "contact.email", "operator": "exists"}, rule]}
    steps = [
        ("start", "trigger", {"event_name": "order.paid"}),
        ("wait", "wait_for_event", {"event": "order.shipped", "timeout": " 2.5d "}),
        ("check", "condition", {"type": "and", "rules": [rule, nested]}),
        ("mail", "send_email", {"from": "A <a@acme.test>", "subject": "Hi", "text": "x"}),
        ("name", "contact_update", {"first_name": "Ann", "properties": {"plan": None}}),
        ("pause", "delay", {"duration": "90"}),
        ("join", "add_to_segment", {"segment_id": segment_id}),
        ("leave", "remove_from_segment", {"segment_id": segment_id}),
        ("forget", "contact_delete", {}),
    ]
    links = [
        ("start", "wait", None),
        ("wait", "check", "event_received"),
        ("wait", "forget", "timeout"),
        ("check", "mail", "condition_met"),
        ("check", "leave", "condition_not_met"),
        ("mail", "name", "default"),
        ("name", "pause", None),
        ("pause", "join", None),
    ]
    return {
        "name": "Every step",
        "status": None,
        "steps": [{"key": k, "type": t, "config": c} for k, t, c in steps],
        "connections": [{"from": a, "to": b, "type": t} for a, b, t in links],
    }
