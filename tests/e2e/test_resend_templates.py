"""Templates through the official ``resend`` SDK against a real server: manage, then send."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import resend
import resend.exceptions

from tests.e2e.conftest import RunningServer


@pytest.fixture
def sdk(server: RunningServer) -> Iterator[RunningServer]:
    previous = (resend.api_key, resend.api_url)
    resend.api_key, resend.api_url = server.test_key, server.url
    yield server
    resend.api_key, resend.api_url = previous


def delivered(email_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        record: dict[str, Any] = dict(resend.Emails.get(email_id))
        if record["status"] == "delivered" or time.monotonic() > deadline:
            return record
        time.sleep(0.05)


def test_create_publish_and_send_with_a_template(sdk: RunningServer) -> None:
    alias = f"order-{uuid.uuid4().hex[:8]}"
    created = resend.Templates.create(
        {
            "name": "Order shipped",
            "alias": alias,
            "subject": "Order {{ ORDER_ID }} shipped",
            "html": "<p>Hi {{ NAME }}, {{ ITEMS }} item(s) are on the way.</p>",
            "variables": [
                {"key": "NAME", "type": "string", "fallback_value": "there"},
                {"key": "ORDER_ID", "type": "string"},
                {"key": "ITEMS", "type": "number", "fallback_value": 1},
            ],
        }
    )
    assert created["object"] == "template"
    template = resend.Templates.get(created["id"])
    assert template["alias"] == alias and template["status"] == "draft"
    assert resend.Templates.publish(created["id"])["id"] == created["id"]

    sent = resend.Emails.send(
        {
            "from": "Shop <orders@acme.test>",
            "to": ["delivered@simulator.test"],
            "template": {"id": alias, "variables": {"ORDER_ID": "A-17", "NAME": "<Ann>"}},
        }
    )
    record = delivered(sent["id"])
    assert record["status"] == "delivered" and record["template_id"] == created["id"]
    assert record["subject"] == "Order A-17 shipped"
    assert record["html"] == "<p>Hi &lt;Ann&gt;, 1 item(s) are on the way.</p>"
    raw = httpx.get(
        f"{sdk.url}/emails/{sent['id']}/raw",
        headers={"Authorization": f"Bearer {sdk.test_key}"},
    )
    assert raw.status_code == 200 and b"Order A-17 shipped" in raw.content


def test_manage_templates_with_the_sdk(sdk: RunningServer) -> None:
    alias = f"promo-{uuid.uuid4().hex[:8]}"
    created = resend.Templates.create({"name": "Promo", "alias": alias, "html": "<p>{{ X }}</p>"})
    resend.Templates.update({"id": created["id"], "subject": "Deal: {{ X }}"})
    assert resend.Templates.get(alias)["subject"] == "Deal: {{ X }}"
    copy = resend.Templates.duplicate(created["id"])
    assert (copy["object"], resend.Templates.get(copy["id"])["alias"]) == (
        "template",
        f"{alias}-copy",
    )
    assert resend.Templates.get(copy["id"])["status"] == "draft"
    listed = {t["id"] for t in resend.Templates.list()["data"]}
    assert {created["id"], copy["id"]} <= listed
    assert resend.Templates.remove(copy["id"])["deleted"] is True
    with pytest.raises(resend.exceptions.ResendError):
        resend.Templates.get(copy["id"])


def test_list_pages_with_limit_after_and_before(sdk: RunningServer) -> None:
    tag = uuid.uuid4().hex[:8]
    for i in range(3):
        resend.Templates.create({"name": f"P{i}", "alias": f"page-{tag}-{i}", "html": "<p>x</p>"})
    full = resend.Templates.list()
    order = [t["id"] for t in full["data"]]
    assert full["has_more"] is False and len(order) >= 3
    walked, params = [], {"limit": 2}
    while True:
        answer = resend.Templates.list(params)  # type: ignore[arg-type]
        walked += [t["id"] for t in answer["data"]]
        if not answer["has_more"]:
            break
        params = {"limit": 2, "after": walked[-1]}
    assert walked == order
    back = resend.Templates.list({"limit": 2, "before": order[-1]})
    assert [t["id"] for t in back["data"]] == order[-3:-1]
    with pytest.raises(resend.exceptions.ValidationError):
        resend.Templates.list({"after": str(uuid.uuid4())})


async def test_the_async_variants(sdk: RunningServer) -> None:
    alias = f"async-{uuid.uuid4().hex[:8]}"
    created = await resend.Templates.create_async(
        {"name": "Async", "alias": alias, "subject": "Hi {{ N }}", "html": "<p>{{ N }}</p>"}
    )
    updated = await resend.Templates.update_async({"id": created["id"], "name": "Async 2"})
    assert updated["id"] == created["id"]
    published = await resend.Templates.publish_async(alias)
    assert published["id"] == created["id"]
    got = await resend.Templates.get_async(created["id"])
    assert (got["name"], got["status"]) == ("Async 2", "published")
    copy = await resend.Templates.duplicate_async(created["id"])
    listed = await resend.Templates.list_async({"limit": 100})
    assert {created["id"], copy["id"]} <= {t["id"] for t in listed["data"]}
    removed = await resend.Templates.remove_async(copy["id"])
    assert (removed["id"], removed["deleted"]) == (copy["id"], True)
    with pytest.raises(resend.exceptions.ResendError) as caught:
        await resend.Templates.get_async(copy["id"])
    assert (caught.value.code, caught.value.error_type) == (404, "not_found")


def test_missing_variables_raise_the_sdk_validation_error(sdk: RunningServer) -> None:
    alias = f"strict-{uuid.uuid4().hex[:8]}"
    resend.Templates.create(
        {"name": "Strict", "alias": alias, "subject": "{{ A }}", "html": "{{ B }} {{ C }}"}
    )
    with pytest.raises(resend.exceptions.ValidationError) as caught:
        resend.Emails.send(
            {"from": "a@acme.test", "to": ["b@example.com"], "template": {"id": alias}}
        )
    assert "A, B, C" in caught.value.message


def test_live_key_needs_a_published_template(sdk: RunningServer) -> None:
    alias = f"draft-{uuid.uuid4().hex[:8]}"
    resend.Templates.create({"name": "Draft", "alias": alias, "subject": "s", "html": "h"})
    resend.api_key = sdk.live_key
    with pytest.raises(resend.exceptions.ResendError) as caught:
        resend.Emails.send({"from": "a@acme.test", "to": "b@x.test", "template": {"id": alias}})
    assert (caught.value.code, caught.value.error_type) == (422, "template_not_published")
