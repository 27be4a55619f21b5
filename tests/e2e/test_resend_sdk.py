"""The official ``resend`` Python SDK, pointed at a real Posthaste server."""

from __future__ import annotations

import time
from collections.abc import Iterator

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


def wait_for_status(server: RunningServer, email_id: str, wanted: str) -> dict[str, object]:
    deadline = time.monotonic() + 10
    while True:
        record: dict[str, object] = dict(resend.Emails.get(email_id))
        if record["status"] == wanted or time.monotonic() > deadline:
            return record
        time.sleep(0.05)


def test_send_and_get(sdk: RunningServer) -> None:
    sent = resend.Emails.send(
        {
            "from": "Acme <hello@acme.test>",
            "to": ["delivered@simulator.test"],
            "subject": "Hello from the SDK",
            "html": "<strong>it works</strong>",
            "tags": [{"name": "campaign", "value": "sdk"}],
        }
    )
    assert sent["id"]
    record = wait_for_status(sdk, sent["id"], "delivered")
    assert record["status"] == "delivered"
    assert record["subject"] == "Hello from the SDK" and record["tags"] == {"campaign": "sdk"}


def test_batch_send(sdk: RunningServer) -> None:
    result = resend.Batch.send(
        [
            {"from": "hello@acme.test", "to": ["a@example.com"], "subject": "one", "text": "1"},
            {"from": "hello@acme.test", "to": ["b@example.com"], "subject": "two", "text": "2"},
        ]
    )
    ids = [entry["id"] for entry in result["data"]]
    assert len(ids) == 2 and all(ids)
    assert {resend.Emails.get(i)["subject"] for i in ids} == {"one", "two"}


def test_attachment_as_byte_values_without_a_content_type(sdk: RunningServer) -> None:
    pdf = b"%PDF-1.7\n" + bytes(range(256))
    sent = resend.Emails.send(
        {
            "from": "hello@acme.test",
            "to": ["a@example.com"],
            "subject": "with a file",
            "text": "see the file",
            # As the SDK documents it: list(f.read()), and no content_type.
            "attachments": [{"filename": "invoice.pdf", "content": list(pdf)}],
        }
    )
    headers = {"Authorization": f"Bearer {sdk.test_key}"}
    listed = httpx.get(f"{sdk.url}/emails/{sent['id']}/attachments", headers=headers).json()
    (attachment,) = listed["data"]
    assert (attachment["filename"], attachment["content_type"], attachment["size"]) == (
        "invoice.pdf",
        "application/pdf",
        len(pdf),
    )
    download = httpx.get(
        f"{sdk.url}/emails/{sent['id']}/attachments/{attachment['id']}", headers=headers
    )
    assert download.content == pdf


def test_validation_error_raises_the_sdk_exception(sdk: RunningServer) -> None:
    with pytest.raises(resend.exceptions.ValidationError) as caught:
        resend.Emails.send(
            {"from": "hello@acme.test", "to": ["not-an-address"], "subject": "x", "text": "y"}
        )
    assert "to" in caught.value.message


def test_invalid_key_raises_the_sdk_exception(sdk: RunningServer) -> None:
    resend.api_key = "ph_test_" + "0" * 32
    with pytest.raises(resend.exceptions.InvalidApiKeyError):
        resend.Emails.get("0190d4c4-0000-7000-8000-000000000000")


def test_live_key_from_an_unverified_domain_is_403(sdk: RunningServer) -> None:
    response = httpx.post(
        f"{sdk.url}/emails",
        headers={"Authorization": f"Bearer {sdk.live_key}"},
        json={"from": "hello@acme.test", "to": "a@example.com", "subject": "x", "text": "y"},
    )
    assert response.status_code == 403 and response.json()["name"] == "domain_not_verified"


def test_server_never_leaks_a_stack_trace(sdk: RunningServer) -> None:
    headers = {"Authorization": f"Bearer {sdk.test_key}", "Content-Type": "application/json"}
    for payload in (
        b'{"from": 1}',
        b'{"to": {"a": 1}}',
        b"[]",
        b"null",
        b'{"attachments": "x"}',
        b'{"from":"a@b.test","to":"c@d.test","subject":"s","text":"t","tags":{"a":{"b":1}}}',
    ):
        response = httpx.post(f"{sdk.url}/emails", content=payload, headers=headers)
        assert response.status_code == 422, response.text
        assert "Traceback" not in response.text and response.json()["name"] == "validation_error"


def test_webhooks_status_and_signing_secret_rotation(sdk: RunningServer) -> None:
    created = resend.Webhooks.create(
        {"endpoint": "https://93.184.216.34/hooks", "events": ["email.sent"]}
    )  # a public address, never contacted: the test sends no email
    hook_id = created["id"]
    updated = resend.Webhooks.update({"webhook_id": hook_id, "status": "disabled"})
    assert updated["id"] == hook_id
    got: dict[str, object] = dict(resend.Webhooks.get(hook_id))
    assert got["status"] == "disabled" and got["enabled"] is False
    rotated: dict[str, object] = dict(resend.Webhooks.rotate_signing_secret(hook_id))
    assert rotated["id"] == hook_id and rotated["status"] == "disabled"
    assert str(rotated["secret"]).startswith("whsec_")
    assert rotated["secret"] != dict(created)["secret"]
