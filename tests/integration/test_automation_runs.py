"""Automation runs end to end in one process: a real worker runs the ``automation_step`` jobs
while the test drives the API; on SQLite and PostgreSQL. Delays are short ("1s") and every
wait is on a condition."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from posthaste.bootstrap import Services
from posthaste.core.ids import now_ms
from posthaste.core.jobs import JobKind
from posthaste.storage.tables import emails, jobs
from tests.conftest import Tenant
from tests.helpers import events_of

FROM = "hello@acme.test"


@pytest.fixture
async def worker(services: Services) -> AsyncIterator[None]:
    running = services.make_worker(idle_check=1)
    task = asyncio.create_task(running.run())
    yield
    running.stop()
    await asyncio.wait_for(task, 30)


async def until(check: Callable[[], Awaitable[Any]], what: str, seconds: float = 30) -> Any:
    for _ in range(int(seconds / 0.05)):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def step(key: str, type_: str, **config: Any) -> dict[str, Any]:
    return {"key": key, "type": type_, "config": config}


def link(source: str, target: str, type_: str = "default") -> dict[str, str]:
    return {"from": source, "to": target, "type": type_}


def send(key: str, subject: str, html: str = "<p>Hi {{contact.first_name}}</p>") -> dict[str, Any]:
    return step(key, "send_email", **{"from": FROM, "subject": subject, "html": html})


class Api:
    def __init__(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        self.client, self.headers = client, tenant.headers()

    async def call(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        response = await self.client.request(method, path, json=body, headers=self.headers)
        assert response.status_code == status, response.text
        return response.json()

    async def automation(self, steps: list[dict[str, Any]], links: list[dict[str, str]]) -> str:
        body = {"name": "A", "status": "enabled", "steps": steps, "connections": links}
        return str((await self.call("POST", "/automations", body, 201))["id"])

    async def contact(self, email: str, **fields: Any) -> str:
        return str((await self.call("POST", "/contacts", {"email": email, **fields}, 201))["id"])

    async def segment(self, name: str = "S") -> str:
        return str((await self.call("POST", "/segments", {"name": name}, 201))["id"])

    async def runs(self, automation_id: str, query: str = "") -> list[dict[str, Any]]:
        listed = await self.call("GET", f"/automations/{automation_id}/runs{query}")
        return list(listed["data"])

    async def run(self, automation_id: str, run_id: str) -> dict[str, Any]:
        return dict(await self.call("GET", f"/automations/{automation_id}/runs/{run_id}"))

    async def ended_run(self, automation_id: str, index: int = 0) -> dict[str, Any]:
        """The automation's ``index``-th oldest run, once it has ended."""

        async def ended() -> dict[str, Any] | None:
            runs = list(reversed(await self.runs(automation_id)))
            if len(runs) <= index or runs[index]["status"] == "running":
                return None
            return await self.run(automation_id, runs[index]["id"])

        found: dict[str, Any] = await until(ended, f"run {index} of {automation_id} to end")
        return found

    async def members(self, segment_id: str) -> list[str]:
        listed = await self.call("GET", f"/segments/{segment_id}/contacts")
        return [c["email"] for c in listed["data"]]


@pytest.fixture
def api(client: httpx.AsyncClient, tenant: Tenant) -> Api:
    return Api(client, tenant)


def by_key(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["key"]: s for s in run["steps"]}


@pytest.mark.usefixtures("worker")
async def test_delay_then_email_then_segment(api: Api, services: Services, tenant: Tenant) -> None:
    segment_id = await api.segment()
    automation_id = await api.automation(
        [
            step("start", "trigger", event="contact.created"),
            step("pause", "delay", duration="1s"),
            send("welcome", "Welcome, {{contact.first_name}} ({{contact.properties.plan}})"),
            step("tag", "add_to_segment", segment_id=segment_id),
        ],
        [link("start", "pause"), link("pause", "welcome"), link("welcome", "tag")],
    )
    contact_id = await api.contact("ann@example.com", first_name="Ann", properties={"plan": "pro"})
    run = await api.ended_run(automation_id)
    assert run["status"] == "completed" and run["contact_id"] == contact_id
    steps = by_key(run)
    assert [s["key"] for s in run["steps"]] == ["start", "pause", "welcome", "tag"]
    assert all(s["status"] == "completed" and s["error"] is None for s in run["steps"])
    email = await api.call("GET", f"/emails/{steps['welcome']['output']['email_id']}")
    assert email["subject"] == "Welcome, Ann (pro)" and email["to"] == ["ann@example.com"]
    assert await api.members(segment_id) == ["ann@example.com"]
    async with services.db.read() as tx:
        origin = (await tx.conn.execute(select(emails.c.origin))).scalar()
        started = await events_of(tx, tenant.team.id, "automation.run.started")
        completed = await events_of(tx, tenant.team.id, "automation.run.completed")
    assert origin == "automation"
    assert [e["id"] for e in started] == [run["id"]] == [e["id"] for e in completed]
    assert completed[0]["status"] == "completed" and completed[0]["contact_id"] == contact_id


def waiting_graph(timeout: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    return (
        [
            step("start", "trigger", event="contact.created"),
            step("await", "wait_for_event", event="order.paid", timeout=timeout),
            send("thanks", "Thanks for {{event.amount}} EUR"),
            step("lapsed", "contact_update", properties={"lapsed": "yes"}),
        ],
        [
            link("start", "await"),
            link("await", "thanks", "event_received"),
            link("await", "lapsed", "timeout"),
        ],
    )


@pytest.mark.usefixtures("worker")
async def test_wait_for_event_continues_when_the_event_comes(api: Api) -> None:
    automation_id = await api.automation(*waiting_graph("1h"))
    await api.contact("bob@example.com")

    async def waiting() -> bool:
        runs = await api.runs(automation_id)
        return bool(runs) and "await" in by_key(await api.run(automation_id, runs[0]["id"]))

    await until(waiting, "the run to wait for the event")
    other = await api.call(
        "POST", "/events/send", {"event": "order.shipped", "email": "bob@example.com"}, 202
    )
    assert other == {"object": "event", "event": "order.shipped"}
    body = {"event": "order.paid", "email": "BOB@example.com", "payload": {"amount": 42}}
    await api.call("POST", "/events/send", body, 202)
    run = await api.ended_run(automation_id)
    assert run["status"] == "completed"
    assert [s["key"] for s in run["steps"]] == ["start", "await", "thanks"]
    email_id = by_key(run)["thanks"]["output"]["email_id"]
    assert (await api.call("GET", f"/emails/{email_id}"))["subject"] == "Thanks for 42 EUR"


@pytest.mark.usefixtures("worker")
async def test_the_event_that_starts_a_run_does_not_end_its_first_wait(
    api: Api, services: Services
) -> None:
    """A run started by ``order.paid`` that first waits for ``order.paid`` waits from its start
    (its job due at the timeout) for the next such event, not the one that started it."""
    steps, links = waiting_graph("1h")
    steps[0] = step("start", "trigger", event="order.paid")
    automation_id = await api.automation(steps, links)
    body = {"event": "order.paid", "email": "dee@example.com", "payload": {"amount": 1}}
    await api.call("POST", "/events/send", body, 202)
    [running] = await api.runs(automation_id, "?status=running")
    assert by_key(await api.run(automation_id, running["id"]))["await"]["status"] == "running"
    async with services.db.read() as tx:
        query = select(jobs.c.available_at).where(jobs.c.kind == JobKind.AUTOMATION_STEP)
        due = (await tx.conn.execute(query)).scalar()
    assert due is not None and due > now_ms() + 1_800_000
    await api.call("POST", "/events/send", {**body, "payload": {"amount": 2}}, 202)
    run = await api.ended_run(automation_id)
    assert [s["key"] for s in run["steps"]] == ["start", "await", "thanks"]
    email_id = by_key(run)["thanks"]["output"]["email_id"]
    assert (await api.call("GET", f"/emails/{email_id}"))["subject"] == "Thanks for 2 EUR"


@pytest.mark.usefixtures("worker")
async def test_wait_for_event_takes_the_timeout_branch(api: Api) -> None:
    automation_id = await api.automation(*waiting_graph("1s"))
    contact_id = await api.contact("cy@example.com")
    run = await api.ended_run(automation_id)
    assert run["status"] == "completed"
    assert [s["key"] for s in run["steps"]] == ["start", "await", "lapsed"]
    contact = await api.call("GET", f"/contacts/{contact_id}")
    assert contact["properties"] == {"lapsed": "yes"}


@pytest.mark.usefixtures("worker")
async def test_a_condition_on_a_property_picks_the_branch(api: Api) -> None:
    pro, free = await api.segment("pro"), await api.segment("free")
    automation_id = await api.automation(
        [
            step("start", "trigger", event="contact.created"),
            step("plan", "condition", field="contact.properties.seats", operator="gt", value=10),
            step("to_pro", "add_to_segment", segment_id=pro),
            step("to_free", "add_to_segment", segment_id=free),
        ],
        [
            link("start", "plan"),
            link("plan", "to_pro", "condition_met"),
            link("plan", "to_free", "condition_not_met"),
        ],
    )
    await api.contact("big@example.com", properties={"seats": 25})
    await api.contact("small@example.com", properties={"seats": "3"})
    await api.contact("none@example.com")
    for index in range(3):
        assert (await api.ended_run(automation_id, index))["status"] == "completed"
    assert await api.members(pro) == ["big@example.com"]
    assert sorted(await api.members(free)) == ["none@example.com", "small@example.com"]


@pytest.mark.usefixtures("worker")
async def test_a_custom_event_for_a_new_address_makes_the_contact_and_starts_runs(
    api: Api,
) -> None:
    automation_id = await api.automation(
        [step("start", "trigger", event="trial.started"), send("hi", "Plan {{event.plan}}")],
        [link("start", "hi")],
    )
    body = {"event": "trial.started", "email": "new@example.com", "payload": {"plan": "gold"}}
    await api.call("POST", "/events/send", body, 202)
    run = await api.ended_run(automation_id)
    contact = await api.call("GET", "/contacts/new@example.com")
    assert run["contact_id"] == contact["id"]
    email_id = by_key(run)["hi"]["output"]["email_id"]
    assert (await api.call("GET", f"/emails/{email_id}"))["subject"] == "Plan gold"
    missing = {"event": "trial.started", "contact_id": "01900000-0000-7000-8000-000000000000"}
    await api.call("POST", "/events/send", missing, 404)
    for bad in (
        {"event": "x"},
        {"event": "x", "email": "a@b.test", "contact_id": contact["id"]},
        {"event": "contact.created", "email": "a@b.test"},
        {"event": "x", "email": "a@b.test", "payload": [1]},
        {"event": "", "email": "a@b.test"},
    ):
        await api.call("POST", "/events/send", bad, 422)


@pytest.mark.usefixtures("worker")
async def test_a_running_run_keeps_its_version(api: Api) -> None:
    steps = [
        step("start", "trigger", event="contact.created"),
        step("pause", "delay", duration="1s"),
        send("v1", "First version"),
    ]
    automation_id = await api.automation(steps, [link("start", "pause"), link("pause", "v1")])
    await api.contact("old@example.com")
    await api.call(
        "PATCH",
        f"/automations/{automation_id}",
        {"steps": [steps[0], send("v2", "Second version")], "connections": [link("start", "v2")]},
    )
    await api.contact("new@example.com")
    first, second = await api.ended_run(automation_id, 0), await api.ended_run(automation_id, 1)
    assert [s["key"] for s in first["steps"]] == ["start", "pause", "v1"]
    assert [s["key"] for s in second["steps"]] == ["start", "v2"]


@pytest.mark.usefixtures("worker")
async def test_disabling_cancels_runs_at_their_next_step_and_stop_cancels_at_once(
    api: Api,
) -> None:
    steps, links = waiting_graph("1h")
    automation_id = await api.automation(steps, links)
    await api.contact("d1@example.com")
    await until(lambda: api.runs(automation_id, "?status=running"), "a running run")
    await api.call("PATCH", f"/automations/{automation_id}", {"status": "disabled"})
    await api.contact("d2@example.com")  # a disabled automation starts no run
    await api.call("POST", "/events/send", {"event": "order.paid", "email": "d1@example.com"}, 202)
    run = await api.ended_run(automation_id)
    assert run["status"] == "cancelled" and "thanks" not in by_key(run)
    assert len(await api.runs(automation_id)) == 1

    await api.call("PATCH", f"/automations/{automation_id}", {"status": "enabled"})
    await api.contact("d3@example.com")
    await until(lambda: api.runs(automation_id, "?status=running"), "a second running run")
    stopped = await api.call("POST", f"/automations/{automation_id}/stop")
    assert stopped["status"] == "disabled"
    assert await api.runs(automation_id, "?status=running") == []
    assert len(await api.runs(automation_id, "?status=cancelled,completed")) == 2
    await api.call("GET", f"/automations/{automation_id}/runs?status=paused", status=422)


@pytest.mark.usefixtures("worker")
async def test_cancel_a_run(api: Api) -> None:
    automation_id = await api.automation(*waiting_graph("1h"))
    await api.contact("e@example.com")
    [running] = await until(lambda: api.runs(automation_id, "?status=running"), "a run")
    path = f"/automations/{automation_id}/runs/{running['id']}/cancel"
    cancelled = await api.call("POST", path)
    assert cancelled["status"] == "cancelled" and cancelled["completed_at"] is not None
    await api.call("POST", path, status=409)
    await api.call("GET", f"/automations/{automation_id}/runs/not-a-run", status=404)


@pytest.mark.usefixtures("worker")
async def test_unsubscribed_contacts_are_skipped_and_a_broken_subject_fails_the_run(
    api: Api, services: Services, tenant: Tenant
) -> None:
    automation_id = await api.automation(
        [step("start", "trigger", event="ping"), send("mail", "About {{event.topic}}")],
        [link("start", "mail")],
    )
    await api.contact("gone@example.com", unsubscribed=True)
    await api.call("POST", "/events/send", {"event": "ping", "email": "gone@example.com"}, 202)
    skipped = await api.ended_run(automation_id, 0)
    assert skipped["status"] == "completed"
    assert by_key(skipped)["mail"]["output"] == {"email_id": None, "skipped": "unsubscribed"}

    body = {
        "event": "ping",
        "email": "x@example.com",
        "payload": {"topic": "a\r\nBcc: evil@x.test"},
    }
    await api.call("POST", "/events/send", body, 202)
    failed = await api.ended_run(automation_id, 1)
    assert failed["status"] == "failed"
    assert "subject" in by_key(failed)["mail"]["error"]
    async with services.db.read() as tx:
        assert (await tx.conn.execute(select(emails.c.id))).first() is None
        [event] = await events_of(tx, tenant.team.id, "automation.run.failed")
    assert event["id"] == failed["id"] and "subject" in event["error"]
