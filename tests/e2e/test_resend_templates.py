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
    assert resend.Templates.get(copy["id"])["alias"] == f"{alias}-copy"
    listed = {t["id"] for t in resend.Templates.list()["data"]}
    assert {created["id"], copy["id"]} <= listed
    assert resend.Templates.remove(copy["id"])["deleted"] is True
    with pytest.raises(resend.exceptions.ResendError):
        resend.Templates.get(copy["id"])


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
    response = httpx.post(
        f"{sdk.url}/emails",
        headers={"Authorization": f"Bearer {sdk.live_key}"},
        json={"from": "a@acme.test", "to": "b@example.com", "template": alias},
    )
    assert response.status_code == 422 and response.json()["name"] == "template_not_published"
