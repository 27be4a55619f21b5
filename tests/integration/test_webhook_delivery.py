"""Webhook delivery end to end: real dispatcher, real aiohttp receivers on loopback, signatures
verified with the ``standardwebhooks`` library exactly as a customer would."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import select
from standardwebhooks import Webhook as StandardWebhook

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Event
from posthaste.storage import webhook_queue
from posthaste.storage.events import insert_events
from posthaste.storage.tables import webhook_deliveries, webhooks
from posthaste.workers.webhooks import WebhookDispatcher
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body
from tests.webhook_receiver import Receiver, eventually, running_receiver


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        webhook_allow_private=True,  # the receivers listen on loopback
        webhook_retry_schedule=(0.05, 0.05),
        webhook_jitter=0.0,
        webhook_timeout=5.0,
    )


@pytest.fixture
async def dispatcher(services: Services) -> AsyncIterator[WebhookDispatcher]:
    running = services.make_webhook_dispatcher(per_endpoint=4)
    task = asyncio.create_task(running.run())
    yield running
    running.stop()
    await asyncio.wait_for(task, 10)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running_receiver() as started:
        yield started


async def _create(
    client: httpx.AsyncClient,
    tenant: Tenant,
    url: str,
    events: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body = {"endpoint": url, "events": events or ["email.queued"], **extra}
    response = await client.post("/webhooks", json=body, headers=tenant.headers())
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def _send(client: httpx.AsyncClient, tenant: Tenant) -> str:
    response = await client.post("/emails", json=email_body(), headers=tenant.headers())
    assert response.status_code == 200, response.text
    email_id: str = response.json()["id"]
    return email_id


async def _events(client: httpx.AsyncClient, tenant: Tenant, hook_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/webhooks/{hook_id}/events", headers=tenant.headers())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def _attempts(
    client: httpx.AsyncClient, tenant: Tenant, hook_id: str, event_id: str
) -> list[dict[str, Any]]:
    path = f"/webhooks/{hook_id}/events/{event_id}/attempts"
    response = await client.get(path, headers=tenant.headers())
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def _settled(client: httpx.AsyncClient, tenant: Tenant, hook_id: str, count: int) -> None:
    async def done() -> bool:
        items = await _events(client, tenant, hook_id)
        return len(items) == count and all(i["status"] != "pending" for i in items)

    await eventually(done, what="deliveries to settle")


async def test_a_delivery_is_signed_and_verifies_with_standardwebhooks(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    hook = await _create(client, tenant, receiver.url)
    email_id = await _send(client, tenant)
    await eventually(lambda: len(receiver.requests) == 1, what="one delivery")

    request = receiver.requests[0]
    payload = StandardWebhook(hook["secret"]).verify(request.body, request.headers)
    assert payload["type"] == "email.queued"
    assert payload["data"]["email_id"] == email_id
    assert payload["created_at"].endswith("Z")
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == "Service-Webhooks/1.0"
    for name in ("id", "timestamp", "signature"):
        assert request.headers[f"svix-{name}"] == request.headers[f"webhook-{name}"]

    await _settled(client, tenant, hook["id"], 1)
    [event] = await _events(client, tenant, hook["id"])
    assert event["id"] == request.headers["webhook-id"]
    assert event["status"] == "delivered" and event["attempts"] == 1
    assert event["payload"] == orjson.loads(request.body)
    assert event["next_attempt_at"] is None
    [attempt] = await _attempts(client, tenant, hook["id"], event["id"])
    assert attempt["success"] is True and attempt["status_code"] == 200
    assert attempt["response_body"] == "answer 200" and attempt["error"] is None
    assert attempt["duration_ms"] >= 0


async def test_two_failures_then_success_are_three_attempts_with_one_webhook_id(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    receiver.statuses = [500, 503, 200]
    hook = await _create(client, tenant, receiver.url)
    await _send(client, tenant)
    await eventually(lambda: len(receiver.requests) == 3, what="three attempts")
    await _settled(client, tenant, hook["id"], 1)

    assert len({r.headers["webhook-id"] for r in receiver.requests}) == 1
    for request in receiver.requests:  # each attempt is signed afresh and verifies
        StandardWebhook(hook["secret"]).verify(request.body, request.headers)
    [event] = await _events(client, tenant, hook["id"])
    assert (event["status"], event["attempts"]) == ("delivered", 3)
    attempts = await _attempts(client, tenant, hook["id"], event["id"])
    assert [(a["status_code"], a["success"]) for a in attempts] == [
        (500, False),
        (503, False),
        (200, True),
    ]
    assert "HTTP 500" in attempts[0]["error"] and attempts[0]["response_body"] == "answer 500"
    resend_names = {"sent_at": "attempted_at", "http_status_code": "status_code"}
    for attempt in attempts:  # Resend's names beside ours, the same values
        assert all(attempt[theirs] == attempt[ours] for theirs, ours in resend_names.items())
        assert attempt["response"] == attempt["response_body"]

    path = f"/webhooks/{hook['id']}/events/{event['id']}/attempts"
    ids = [a["id"] for a in attempts]
    for query, expected, more in [
        ("limit=2", ids[:2], True),
        (f"limit=2&after={ids[1]}", ids[2:], False),
        (f"limit=1&before={ids[2]}", ids[1:2], True),
        (f"after={ids[0]}", ids[1:], False),
    ]:
        body = (await client.get(f"{path}?{query}", headers=tenant.headers())).json()
        assert ([a["id"] for a in body["data"]], body["has_more"]) == (expected, more), query
    bad = await client.get(f"{path}?after={new_id()}", headers=tenant.headers())
    assert bad.status_code == 422 and bad.json()["name"] == "validation_error"


async def test_events_page_newest_first_with_limit_after_and_before(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    hook = await _create(client, tenant, receiver.url)
    for _ in range(4):
        await _send(client, tenant)
    await _settled(client, tenant, hook["id"], 4)
    response = await client.get(f"/webhooks/{hook['id']}/events", headers=tenant.headers())
    assert response.json()["has_more"] is False
    order = [e["id"] for e in response.json()["data"]]
    assert order == sorted(order, reverse=True)  # newest first

    async def page(query: str) -> tuple[list[str], bool]:
        path = f"/webhooks/{hook['id']}/events?{query}"
        body = (await client.get(path, headers=tenant.headers())).json()
        return [e["id"] for e in body["data"]], body["has_more"]

    assert await page("limit=3") == (order[:3], True)
    assert await page(f"limit=3&after={order[2]}") == (order[3:], False)
    assert await page(f"limit=2&before={order[3]}") == (order[1:3], True)
    assert await page(f"before={order[1]}") == (order[:1], False)
    for query in (f"after={new_id()}", "after=nope", f"after={order[0]}&before={order[1]}"):
        bad = await client.get(f"/webhooks/{hook['id']}/events?{query}", headers=tenant.headers())
        assert bad.status_code == 422 and bad.json()["name"] == "validation_error", query


async def test_after_the_last_retry_the_event_is_failed(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    receiver.default_status = 500
    hook = await _create(client, tenant, receiver.url)
    await _send(client, tenant)
    await _settled(client, tenant, hook["id"], 1)
    [event] = await _events(client, tenant, hook["id"])
    # The first attempt, then one per entry of the two-entry schedule.
    assert (event["status"], event["attempts"], event["next_attempt_at"]) == ("failed", 3, None)
    assert len(receiver.requests) == 3


async def test_a_redirect_is_a_failure_and_is_not_followed(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    receiver.statuses = [302, 200]
    hook = await _create(client, tenant, receiver.url)
    await _send(client, tenant)
    await _settled(client, tenant, hook["id"], 1)
    [event] = await _events(client, tenant, hook["id"])
    first, second = await _attempts(client, tenant, hook["id"], event["id"])
    assert first["success"] is False and first["status_code"] == 302
    assert "redirect" in first["error"] and "not followed" in first["error"]
    assert second["success"] is True
    assert len(receiver.requests) == 2  # the Location was never requested


async def test_replay_delivers_again_with_the_same_webhook_id(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    hook = await _create(client, tenant, receiver.url)
    await _send(client, tenant)
    await _settled(client, tenant, hook["id"], 1)
    [event] = await _events(client, tenant, hook["id"])

    path = f"/webhooks/{hook['id']}/events/{event['id']}/replay"
    response = await client.post(path, headers=tenant.headers())
    assert response.status_code == 200, response.text
    assert response.json()["id"] == event["id"]
    await eventually(lambda: len(receiver.requests) == 2, what="the replay")
    one = await client.get(f"/webhooks/{hook['id']}/events/{event['id']}", headers=tenant.headers())
    assert one.status_code == 200 and one.json()["payload"] == event["payload"]
    first, replayed = receiver.requests
    assert replayed.headers["webhook-id"] == first.headers["webhook-id"] == event["id"]
    assert orjson.loads(replayed.body) == orjson.loads(first.body)
    StandardWebhook(hook["secret"]).verify(replayed.body, replayed.headers)
    await _settled(client, tenant, hook["id"], 1)
    assert len(await _attempts(client, tenant, hook["id"], event["id"])) == 2


async def test_a_failed_replay_returns_the_event_to_failed_without_new_retries(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    receiver.default_status = 500
    hook = await _create(client, tenant, receiver.url)
    await _send(client, tenant)
    await _settled(client, tenant, hook["id"], 1)
    [event] = await _events(client, tenant, hook["id"])
    path = f"/webhooks/{hook['id']}/events/{event['id']}/replay"
    assert (await client.post(path, headers=tenant.headers())).status_code == 200
    await eventually(lambda: len(receiver.requests) == 4, what="the replay")
    await _settled(client, tenant, hook["id"], 1)
    [after] = await _events(client, tenant, hook["id"])
    assert (after["status"], after["attempts"]) == ("failed", 4)


async def test_a_disabled_endpoint_receives_nothing(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    async with running_receiver() as paused:
        off = await _create(client, tenant, paused.url, enabled=False)
        on = await _create(client, tenant, receiver.url)
        await _send(client, tenant)
        await eventually(lambda: len(receiver.requests) == 1, what="the enabled endpoint")
        await _settled(client, tenant, on["id"], 1)
        assert paused.requests == []
        assert await _events(client, tenant, off["id"]) == []
        replay = await client.post(
            f"/webhooks/{off['id']}/events/{new_id()}/replay", headers=tenant.headers()
        )
        assert replay.status_code == 409


async def test_retries_pause_while_disabled_and_resume_when_enabled(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, services: Services
) -> None:
    hook = await _create(client, tenant, receiver.url)
    await _send(client, tenant)  # pending: no dispatcher runs yet
    patch = await client.patch(
        f"/webhooks/{hook['id']}", json={"enabled": False}, headers=tenant.headers()
    )
    assert patch.status_code == 200 and patch.json()["enabled"] is False
    running = services.make_webhook_dispatcher()
    task = asyncio.create_task(running.run())
    try:
        await eventually(lambda: _paused(services, hook["id"]), what="the delivery to pause")
        [event] = await _events(client, tenant, hook["id"])
        assert event["status"] == "pending" and receiver.requests == []
        enable = {"enabled": True}
        await client.patch(f"/webhooks/{hook['id']}", json=enable, headers=tenant.headers())
        await eventually(lambda: len(receiver.requests) == 1, what="the resumed delivery")
    finally:
        running.stop()
        await asyncio.wait_for(task, 10)


async def _paused(services: Services, hook_id: str) -> bool:
    query = select(webhook_deliveries.c.due_at).where(webhook_deliveries.c.webhook_id == hook_id)
    async with services.db.read() as tx:
        return (await tx.conn.execute(query)).scalar_one() is None


async def test_only_subscribed_types_are_delivered(
    client: httpx.AsyncClient,
    tenant: Tenant,
    receiver: Receiver,
    dispatcher: WebhookDispatcher,
    services: Services,
) -> None:
    await _create(client, tenant, receiver.url, events=["email.delivered", "domain.created"])
    now = now_ms()
    items = [
        Event(new_id(), tenant.team.id, kind, None, now, {"n": n})
        for n, kind in enumerate(
            ["email.queued", "email.delivered", "email.sent", "domain.created"]
        )
    ]
    async with services.db.transaction() as tx:
        await insert_events(tx, items)
    await eventually(lambda: len(receiver.requests) == 2, what="two subscribed events")
    assert sorted(orjson.loads(r.body)["type"] for r in receiver.requests) == [
        "domain.created",
        "email.delivered",
    ]


async def test_an_event_of_a_rolled_back_transaction_is_never_delivered(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, services: Services
) -> None:
    hook = await _create(client, tenant, receiver.url)
    event = Event(new_id(), tenant.team.id, "email.queued", None, now_ms(), {})
    with pytest.raises(RuntimeError):
        async with services.db.transaction() as tx:
            await insert_events(tx, [event])
            raise RuntimeError("the cause failed")
    assert await _events(client, tenant, hook["id"]) == []


async def test_a_slow_or_dead_endpoint_does_not_delay_a_live_one(
    client: httpx.AsyncClient, tenant: Tenant, services: Services, dispatcher: WebhookDispatcher
) -> None:
    hold = asyncio.Event()
    async with running_receiver(hold=hold) as slow, running_receiver() as live:
        dead_url = "http://127.0.0.1:9/hook"  # discard port: connection refused
        slow_hook = await _create(client, tenant, slow.url)
        await _create(client, tenant, dead_url)
        live_hook = await _create(client, tenant, live.url)
        now = now_ms()
        items = [Event(new_id(), tenant.team.id, "email.queued", None, now, {}) for _ in range(40)]
        async with services.db.transaction() as tx:
            await insert_events(tx, items)
        # Every event reaches the live endpoint while the slow one still holds its requests.
        await eventually(lambda: len(live.requests) == 40, what="the live endpoint")
        assert slow.requests == []  # every slow request is still held
        await eventually(lambda: slow.in_flight == 4, what="the slow endpoint's bound")
        await _settled(client, tenant, live_hook["id"], 40)
        listed = [e["id"] for e in await _events(client, tenant, live_hook["id"])]
        assert listed == sorted((e.id for e in items), reverse=True)  # newest first
        hold.set()
        await _settled(client, tenant, slow_hook["id"], 40)
        assert slow.most_in_flight <= 4 and len(slow.requests) == 40


async def test_rotation_signs_with_both_secrets_for_a_day(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, dispatcher: WebhookDispatcher
) -> None:
    hook = await _create(client, tenant, receiver.url)
    response = await client.post(f"/webhooks/{hook['id']}/secret/rotate", headers=tenant.headers())
    assert response.status_code == 200
    rotated = response.json()
    assert rotated["secret"] != hook["secret"] and rotated["id"] == hook["id"]
    await _send(client, tenant)
    await eventually(lambda: len(receiver.requests) == 1, what="a delivery")
    request = receiver.requests[0]
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (hook["secret"], rotated["secret"]):
        StandardWebhook(secret).verify(request.body, request.headers)


async def test_deleting_an_endpoint_mid_delivery_loses_nothing_elsewhere(
    client: httpx.AsyncClient,
    tenant: Tenant,
    services: Services,
    dispatcher: WebhookDispatcher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hold = asyncio.Event()
    async with running_receiver(hold=hold) as doomed, running_receiver() as kept:
        gone = await _create(client, tenant, doomed.url)
        stays = await _create(client, tenant, kept.url)
        await _send(client, tenant)
        await eventually(lambda: doomed.in_flight == 1, what="the held request")
        response = await client.delete(f"/webhooks/{gone['id']}", headers=tenant.headers())
        assert response.status_code == 200
        hold.set()  # the attempt finishes after its endpoint is gone: nothing to record
        await _send(client, tenant)
        await eventually(lambda: len(kept.requests) == 2, what="the other endpoint")
        await _settled(client, tenant, stays["id"], 2)
    async with services.db.read() as tx:
        left = await tx.conn.execute(
            select(webhook_deliveries.c.event_id).where(
                webhook_deliveries.c.webhook_id == gone["id"]
            )
        )
        assert left.all() == []
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []  # every write succeeded


async def test_a_failed_pause_does_not_hold_back_the_rest_of_the_claim(
    client: httpx.AsyncClient,
    tenant: Tenant,
    receiver: Receiver,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with running_receiver() as other:
        live = await _create(client, tenant, receiver.url)
        gone = await _create(client, tenant, other.url)
        await _send(client, tenant)  # one pending delivery each; no dispatcher runs yet
        # Disabled behind the service's back: its delivery stays due, so the next claim takes
        # it together with the live one and must pause it.
        async with services.db.transaction() as tx:
            await tx.conn.execute(
                webhooks.update().where(webhooks.c.id == gone["id"]).values(enabled=False)
            )

        async def broken_pause(*_: object) -> None:
            raise RuntimeError("the database refused the pause")

        monkeypatch.setattr(webhook_queue, "pause", broken_pause)
        running = services.make_webhook_dispatcher(per_endpoint=4)
        task = asyncio.create_task(running.run())
        try:
            await eventually(lambda: len(receiver.requests) == 1, what="the live endpoint")
            await _settled(client, tenant, live["id"], 1)
        finally:
            running.stop()
            await asyncio.wait_for(task, 10)
        assert other.requests == []


async def test_an_attempt_finishing_while_the_dispatcher_stops_is_recorded(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    hold = asyncio.Event()
    async with running_receiver(hold=hold) as slow:
        hook = await _create(client, tenant, slow.url)
        await _send(client, tenant)
        running = services.make_webhook_dispatcher(per_endpoint=4)
        task = asyncio.create_task(running.run())
        await eventually(lambda: slow.in_flight == 1, what="the held request")
        running.stop()  # the attempt is in flight: stopping waits for it (the drain)
        await asyncio.sleep(0.2)
        hold.set()
        await asyncio.wait_for(task, 10)
    [event] = await _events(client, tenant, hook["id"])
    assert event["status"] == "delivered" and event["attempts"] == 1


async def test_finished_attempts_are_written_in_groups_and_the_last_at_stop(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, services: Services
) -> None:
    hook = await _create(client, tenant, receiver.url)
    running = services.make_webhook_dispatcher(per_endpoint=4, flush_interval=60)
    task = asyncio.create_task(running.run())
    try:
        await _send(client, tenant)
        await _settled(client, tenant, hook["id"], 1)  # the first group is written at once
        await _send(client, tenant)
        await eventually(lambda: len(receiver.requests) == 2, what="the second delivery")
        await asyncio.sleep(0.3)
        newest = (await _events(client, tenant, hook["id"]))[0]
        assert newest["status"] == "pending"  # answered, but its group gathers for a minute
    finally:
        running.stop()  # ends the gathering: the last group is written now, not in a minute
        await asyncio.wait_for(task, 5)
    statuses = [e["status"] for e in await _events(client, tenant, hook["id"])]
    assert statuses == ["delivered", "delivered"]
    assert running.flush_rounds == 2


async def test_next_due_tells_what_is_due_now_and_when_the_next_falls_due(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    await _create(client, tenant, "http://127.0.0.1:9/hook")
    now = now_ms()
    async with services.db.read() as tx:
        assert await webhook_queue.next_due(tx, now) == webhook_queue.Due(False, None)
    items = [Event(new_id(), tenant.team.id, "email.queued", None, now, {}) for _ in range(3)]
    async with services.db.transaction() as tx:
        await insert_events(tx, items)  # three deliveries, due now
    async with services.db.read() as tx:
        assert await webhook_queue.next_due(tx, now_ms()) == webhook_queue.Due(True, None)
    later = now + 60_000
    async with services.db.transaction() as tx:
        await tx.conn.execute(
            webhook_deliveries.update()
            .where(webhook_deliveries.c.event_id.in_([items[0].id, items[1].id]))
            .values(due_at=later + 1)
        )
        await tx.conn.execute(
            webhook_deliveries.update()
            .where(webhook_deliveries.c.event_id == items[2].id)
            .values(due_at=later)
        )
    async with services.db.read() as tx:
        assert await webhook_queue.next_due(tx, now_ms()) == webhook_queue.Due(False, later)
        assert await webhook_queue.next_due(tx, later) == webhook_queue.Due(True, later + 1)


async def test_events_fan_out_to_their_own_teams_subscribed_enabled_endpoints_only(
    client: httpx.AsyncClient, tenant: Tenant, receiver: Receiver, services: Services
) -> None:
    """The fan-out as stored (PostgreSQL does it inside the events' own INSERT)."""
    other = await make_tenant(services)
    sent = ["email.sent"]
    ours = await _create(client, tenant, receiver.url, events=["email.sent", "email.bounced"])
    off = await _create(client, tenant, receiver.url, events=sent, enabled=False)
    elsewhere = await _create(client, tenant, receiver.url, events=["email.delivered"])
    theirs = await _create(client, other, receiver.url, events=sent)
    now = now_ms()
    items = [
        Event(new_id(), tenant.team.id, kind, None, now, {})
        for kind in ("email.sent", "email.bounced", "email.queued")
    ]
    async with services.db.transaction() as tx:
        await insert_events(tx, items)
    query = select(webhook_deliveries.c.webhook_id, webhook_deliveries.c.event_id)
    async with services.db.read() as tx:
        stored = {tuple(row) for row in await tx.conn.execute(query)}
    assert stored == {(ours["id"], items[0].id), (ours["id"], items[1].id)}
    assert not {off["id"], elsewhere["id"], theirs["id"]} & {hook for hook, _ in stored}
