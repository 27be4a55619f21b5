"""Random sequences of API calls (hypothesis) keep the invariants a user relies on:

- no lost email: every accepted email is listed, found by id, and has the status its history
  gives it (canceled once canceled, never again queued);
- cursor lists neither skip nor repeat, whatever the page size;
- templates and webhooks created and deleted are listed exactly while they exist;
- another team sees none of it: 404 for every id, nothing in its lists.

Each example runs on two new teams, so examples do not see each other's data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.ids import format_ms, now_ms
from tests.conftest import make_tenant


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, webhook_allow_private=True)  # endpoints on loopback


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "send",
                "schedule",
                "cancel",
                "template",
                "delete_template",
                "webhook",
                "delete_webhook",
                "list",
            ]
        ),
        st.integers(min_value=0, max_value=10_000),
    ),
    min_size=1,
    max_size=14,
)


async def pages(
    http: httpx.AsyncClient, path: str, headers: dict[str, str], size: int
) -> list[str]:
    """Every id of a cursor list, walked ``size`` at a time; fails on a repeat."""
    seen: list[str] = []
    cursor = ""
    for _ in range(1000):
        params: dict[str, Any] = {"limit": size}
        if cursor:
            params["cursor"] = cursor
        answer = await http.get(path, params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        ids = [item["id"] for item in body["data"]]
        assert len(ids) <= size
        assert not set(ids) & set(seen), "a cursor list repeated an item"
        seen += ids
        cursor = body.get("next_cursor") or ""
        if not cursor:
            return seen
    raise AssertionError("the cursor list never ended")


@examples(
    max_examples=12,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
async def test_random_call_sequences_keep_the_invariants(
    services: Services, client: httpx.AsyncClient, ops: list[tuple[str, int]]
) -> None:
    owner, other = await make_tenant(services), await make_tenant(services)
    mine, theirs = owner.headers(), other.headers()
    emails: dict[str, str] = {}  # id → expected status family: "live" or "canceled"
    templates: set[str] = set()
    hooks: set[str] = set()
    for op, n in ops:
        if op in ("send", "schedule"):
            body: dict[str, Any] = {
                "from": "hello@acme.test",
                "to": f"r{n}@example.com",
                "subject": f"s{n}",
                "text": "t",
            }
            if op == "schedule":
                body["scheduled_at"] = format_ms(now_ms() + 3_600_000 + n)
            answer = await client.post("/emails", json=body, headers=mine)
            assert answer.status_code == 200, answer.text
            emails[answer.json()["id"]] = "scheduled" if op == "schedule" else "queued"
        elif op == "cancel" and emails:
            email_id = sorted(emails)[n % len(emails)]
            answer = await client.post(f"/emails/{email_id}/cancel", headers=mine)
            if emails[email_id] in ("scheduled", "queued"):
                assert answer.status_code in (200, 409), answer.text
                if answer.status_code == 200:
                    emails[email_id] = "canceled"
            else:
                assert answer.status_code == 409, answer.text
            foreign = await client.post(f"/emails/{email_id}/cancel", headers=theirs)
            assert foreign.status_code == 404
        elif op == "template":
            answer = await client.post(
                "/templates",
                json={"name": f"t{n}-{len(templates)}", "html": "<p>{{{NAME}}}</p>"},
                headers=mine,
            )
            assert answer.status_code in (200, 201), answer.text
            templates.add(answer.json()["id"])
        elif op == "delete_template" and templates:
            template_id = sorted(templates)[n % len(templates)]
            assert (
                await client.delete(f"/templates/{template_id}", headers=theirs)
            ).status_code == 404
            answer = await client.delete(f"/templates/{template_id}", headers=mine)
            assert answer.status_code == 200, answer.text
            templates.discard(template_id)
        elif op == "webhook":
            answer = await client.post(
                "/webhooks",
                json={"endpoint": f"http://127.0.0.1:9/in{n}", "events": ["email.sent"]},
                headers=mine,
            )
            assert answer.status_code in (200, 201), answer.text
            hooks.add(answer.json()["id"])
        elif op == "delete_webhook" and hooks:
            hook_id = sorted(hooks)[n % len(hooks)]
            assert (await client.delete(f"/webhooks/{hook_id}", headers=theirs)).status_code == 404
            answer = await client.delete(f"/webhooks/{hook_id}", headers=mine)
            assert answer.status_code == 200, answer.text
            hooks.discard(hook_id)
        elif op == "list":
            size = 1 + n % 7
            assert set(await pages(client, "/emails", mine, size)) == set(emails)

    listed = await pages(client, "/emails", mine, 3)
    assert sorted(listed) == sorted(emails)  # none lost, none repeated
    assert listed == sorted(listed, reverse=True)  # newest first (ids are time-ordered)
    for email_id, status in emails.items():
        record = (await client.get(f"/emails/{email_id}", headers=mine)).json()
        assert record["status"] == status, (record["status"], status)
        assert (await client.get(f"/emails/{email_id}", headers=theirs)).status_code == 404
    template_list = (await client.get("/templates", headers=mine)).json()["data"]
    assert {t["id"] for t in template_list} == templates
    hook_list = (await client.get("/webhooks", headers=mine)).json()["data"]
    assert {h["id"] for h in hook_list} == hooks
    assert await pages(client, "/emails", theirs, 5) == []
    assert (await client.get("/templates", headers=theirs)).json()["data"] == []
    assert (await client.get("/webhooks", headers=theirs)).json()["data"] == []
