"""The official ``resend`` Python SDK, pointed at a real Posthaste server: every method on the
resources Posthaste has (emails, batch, attachments, domains, webhooks, API keys; templates in
test_resend_templates.py), what each returns, and the change read back.

docs/api.md's "Resend compatibility" table says, method by method, what these tests show.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import resend
import resend.exceptions

from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import RunningServer
from tests.webhook_receiver import eventually, running_receiver


@pytest.fixture(scope="module")
def dns_host() -> Iterator[ZoneServer]:
    yield from running_zone()


@pytest.fixture(scope="module")
def server_env(dns_host: ZoneServer) -> dict[str, str]:
    return {
        "POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}",
        "POSTHASTE_WEBHOOK_ALLOW_PRIVATE": "true",  # the webhook receiver is on loopback
    }


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


def pages(list_page: Callable[[dict[str, Any]], Any], limit: int) -> list[list[str]]:
    """Every page of a list, walked forwards with ``after`` as the SDK's callers do."""
    walked: list[list[str]] = []
    params: dict[str, Any] = {"limit": limit}
    while True:
        answer = list_page(params)
        ids = [item["id"] for item in answer["data"]]
        walked.append(ids)
        if not answer["has_more"]:
            return walked
        params = {"limit": limit, "after": ids[-1]}


def check_paging(list_page: Callable[[dict[str, Any]], Any], made: list[str]) -> None:
    """``list`` with limit/after/before and has_more, as Resend pages, over ``made`` (whose
    order the full list gives); ``made`` holds at least 3 ids, all of the list."""
    full = list_page({})
    order = [item["id"] for item in full["data"]]
    assert sorted(order) == sorted(made) and full["has_more"] is False
    walked = pages(list_page, 2)
    assert [i for page in walked for i in page] == order
    assert all(len(page) == 2 for page in walked[:-1])
    back = list_page({"limit": 2, "before": order[-1]})
    assert [item["id"] for item in back["data"]] == order[-3:-1]
    assert back["has_more"] is (len(order) > 3)


def send(subject: str = "s", **fields: Any) -> str:
    body = {"from": "hello@acme.test", "to": ["delivered@simulator.test"], "subject": subject}
    sent = resend.Emails.send({"text": "t", **body, **fields})  # type: ignore[typeddict-item]
    return str(sent["id"])


# Emails


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
    assert record["status"] == "delivered" and record["object"] == "email"
    assert record["subject"] == "Hello from the SDK" and record["tags"] == {"campaign": "sdk"}
    assert record["from"] == "Acme <hello@acme.test>" and record["to"] == [
        "delivered@simulator.test"
    ]


def test_send_with_an_idempotency_key(sdk: RunningServer) -> None:
    key = f"order-{uuid.uuid4()}"
    body: resend.Emails.SendParams = {
        "from": "hello@acme.test",
        "to": ["a@example.com"],
        "subject": "once",
        "text": "only once",
    }
    first = resend.Emails.send(body, {"idempotency_key": key})
    again = resend.Emails.send(body, {"idempotency_key": key})
    assert again["id"] == first["id"]
    with pytest.raises(resend.exceptions.ResendError) as caught:
        resend.Emails.send({**body, "subject": "other"}, {"idempotency_key": key})
    assert (caught.value.code, caught.value.error_type) == (409, "invalid_idempotent_request")
    with pytest.raises(resend.exceptions.ResendError) as too_long:
        resend.Emails.send(body, {"idempotency_key": "x" * 257})
    assert (too_long.value.code, too_long.value.error_type) == (400, "invalid_idempotency_key")


def test_list_pages_with_limit_after_and_before(sdk: RunningServer) -> None:
    tag = uuid.uuid4().hex[:8]
    made = [send(f"{tag}-{i}") for i in range(5)]
    newest_first = list(reversed(made))
    first = resend.Emails.list({"limit": 2})
    assert first["object"] == "list" and first["has_more"] is True
    assert [e["id"] for e in first["data"]] == newest_first[:2]
    walked = pages(resend.Emails.list, 2)
    flat = [i for page in walked for i in page]
    assert flat[:5] == newest_first  # older emails of other tests follow
    back = resend.Emails.list({"limit": 2, "before": newest_first[4]})
    assert [e["id"] for e in back["data"]] == newest_first[2:4] and back["has_more"] is True
    with pytest.raises(resend.exceptions.ValidationError):
        resend.Emails.list({"after": str(uuid.uuid4())})  # not one of the team's emails


def test_update_reschedules_and_cancel_cancels(sdk: RunningServer) -> None:
    later = datetime.now(UTC) + timedelta(days=1)
    email_id = send("scheduled", scheduled_at=later.isoformat())
    assert resend.Emails.get(email_id)["status"] == "scheduled"
    new_time = (later + timedelta(hours=2)).replace(microsecond=0)
    updated = resend.Emails.update({"id": email_id, "scheduled_at": new_time.isoformat()})
    assert (updated["object"], updated["id"]) == ("email", email_id)
    got = resend.Emails.get(email_id)
    assert datetime.fromisoformat(got["scheduled_at"]) == new_time
    canceled = resend.Emails.cancel(email_id)
    assert (canceled["object"], canceled["id"]) == ("email", email_id)
    assert resend.Emails.get(email_id)["status"] == "canceled"
    with pytest.raises(resend.exceptions.ResendError) as caught:
        resend.Emails.cancel(email_id)  # the state forbids it now
    assert (caught.value.code, caught.value.error_type) == (409, "conflict")


def test_share_and_metrics_are_not_supported(sdk: RunningServer) -> None:
    email_id = send("not shared")
    with pytest.raises(resend.exceptions.ResendError) as share:
        resend.Emails.share(email_id)
    assert (share.value.code, share.value.error_type) == (404, "not_found")
    with pytest.raises(resend.exceptions.ResendError) as metrics:
        resend.Emails.metrics()
    assert (metrics.value.code, metrics.value.error_type) == (404, "not_found")


def test_an_unknown_email_is_a_404(sdk: RunningServer) -> None:
    with pytest.raises(resend.exceptions.ResendError) as caught:
        resend.Emails.get(str(uuid.uuid4()))
    assert (caught.value.code, caught.value.error_type) == (404, "not_found")


# Attachments


def test_attachments_list_and_get(sdk: RunningServer) -> None:
    pdf = b"%PDF-1.7\n" + bytes(range(256))
    email_id = send(
        "with files",
        html='<img src="cid:logo">',
        attachments=[
            # As the SDK documents it: list(f.read()), and no content_type.
            {"filename": "invoice.pdf", "content": list(pdf)},
            {"filename": "logo.png", "content": list(b"\x89PNG"), "content_id": "logo"},
            {"filename": "notes.txt", "content": list(b"notes")},
        ],
    )
    listed = resend.Emails.Attachments.list(email_id)
    assert listed["object"] == "list" and listed["has_more"] is False
    by_name = {a["filename"]: a for a in listed["data"]}
    assert (by_name["invoice.pdf"]["content_type"], by_name["invoice.pdf"]["size"]) == (
        "application/pdf",
        len(pdf),
    )
    assert by_name["logo.png"]["content_disposition"] == "inline"
    order = [a["id"] for a in listed["data"]]
    first = resend.Emails.Attachments.list(email_id, {"limit": 1})
    assert [a["id"] for a in first["data"]] == order[:1] and first["has_more"] is True
    rest = resend.Emails.Attachments.list(email_id, {"limit": 5, "after": order[0]})
    assert [a["id"] for a in rest["data"]] == order[1:] and rest["has_more"] is False

    got = resend.Emails.Attachments.get(email_id, by_name["invoice.pdf"]["id"])
    assert got["object"] == "attachment" and got["id"] == by_name["invoice.pdf"]["id"]
    assert (got["filename"], got["content_type"], got["size"]) == (
        "invoice.pdf",
        "application/pdf",
        len(pdf),
    )
    assert got["content_disposition"] == "attachment" and got["expires_at"]
    download = httpx.get(got["download_url"])  # a signed link: no key needed
    assert download.status_code == 200 and download.content == pdf
    with pytest.raises(resend.exceptions.ResendError) as caught:
        resend.Emails.Attachments.get(email_id, str(uuid.uuid4()))
    assert caught.value.code == 404


# Batch


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


def test_batch_ignores_the_idempotency_key_and_reports_bad_items(sdk: RunningServer) -> None:
    items: list[resend.Emails.SendParams] = [
        {"from": "hello@acme.test", "to": ["a@example.com"], "subject": "ok", "text": "1"},
        {"from": "hello@acme.test", "to": ["not-an-address"], "subject": "bad", "text": "2"},
    ]
    options: resend.Batch.SendOptions = {"idempotency_key": f"b-{uuid.uuid4()}"}
    first = resend.Batch.send(items, options)
    again = resend.Batch.send(items, options)  # batch items take no idempotency key: sent again
    assert first["data"][0]["id"] != again["data"][0]["id"]
    entry = first["data"][1]
    assert "id" not in entry and entry["error"]["name"] == "validation_error"  # type: ignore[typeddict-item]
    with pytest.raises(resend.exceptions.ValidationError):
        resend.Batch.send([])


# Domains


def publish(dns_host: ZoneServer, records: list[dict[str, Any]]) -> None:
    for record in records:
        if record["type"] == "TXT":
            dns_host.add(record["name"], "TXT", record["value"])
        else:
            dns_host.add(record["name"], "MX", (record["priority"], record["value"]))


def test_domains(sdk: RunningServer, dns_host: ZoneServer) -> None:
    name = f"sdk-{uuid.uuid4().hex[:8]}.test"
    created = resend.Domains.create(
        {"name": name, "open_tracking": False, "custom_return_path": "outbound"}
    )
    spf = [r["name"] for r in created["records"] if r["record"] == "SPF"]
    assert spf and all(n == f"send.{name}" for n in spf)  # custom_return_path is ignored
    assert (created["object"], created["name"], created["status"]) == (
        "domain",
        name,
        "not_started",
    )
    assert {r["record"] for r in created["records"]} >= {"DKIM", "SPF"}
    got = resend.Domains.get(created["id"])
    assert got["id"] == created["id"] and got["records"] == created["records"]
    publish(dns_host, created["records"])
    verified = resend.Domains.verify(created["id"])
    assert verified["id"] == created["id"]
    assert resend.Domains.get(created["id"])["status"] == "verified"
    updated = resend.Domains.update(
        {"id": created["id"], "click_tracking": True, "tls": "enforced"}
    )
    assert updated["id"] == created["id"]
    after = resend.Domains.get(created["id"])
    assert after["click_tracking"] is True and after["tls"] == "enforced"

    more = [resend.Domains.create({"name": f"p{i}-{name}"})["id"] for i in range(3)]
    mine = {d["id"] for d in resend.Domains.list()["data"]}
    assert {created["id"], *more} <= mine
    check_paging(resend.Domains.list, list(mine))

    removed = resend.Domains.remove(created["id"])
    assert (removed["id"], removed["deleted"]) == (created["id"], True)  # type: ignore[typeddict-item]
    with pytest.raises(resend.exceptions.ResendError) as caught:
        resend.Domains.get(created["id"])
    assert caught.value.code == 404


def test_domain_claims(sdk: RunningServer, dns_host: ZoneServer) -> None:
    name = f"claim-{uuid.uuid4().hex[:8]}.test"
    claim: dict[str, Any] = dict(resend.DomainClaims.create({"name": name}))
    assert (claim["object"], claim["name"], claim["status"]) == ("domain_claim", name, "pending")
    domain_id = claim["domain_id"]
    assert resend.Domains.get(domain_id)["name"] == name  # the claim added the domain
    got: dict[str, Any] = dict(resend.DomainClaims.get(domain_id))
    assert got["record"] == claim["record"] and got["record"]["type"] == "TXT"
    with pytest.raises(resend.exceptions.ValidationError):
        resend.DomainClaims.verify(domain_id)  # the TXT record is not published yet
    dns_host.add(claim["record"]["name"], "TXT", claim["record"]["value"])
    verified: dict[str, Any] = dict(resend.DomainClaims.verify(domain_id))
    assert verified["status"] == "claimed"
    assert resend.Domains.get(domain_id)["claimed"] is True  # type: ignore[typeddict-item]


# Webhooks (the async variants, beside a receiver in this event loop)


def _lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


async def test_webhooks_through_the_async_sdk_and_verify_a_real_delivery(
    sdk: RunningServer,
) -> None:
    async with running_receiver() as receiver:
        created = await resend.Webhooks.create_async(
            {"endpoint": receiver.url, "events": ["email.delivered"]}
        )
        hook_id = created["id"]
        secret = created["signing_secret"]
        assert secret.startswith("whsec_") and dict(created)["secret"] == secret
        got = await resend.Webhooks.get_async(hook_id)
        assert got["endpoint"] == receiver.url and got["status"] == "enabled"
        assert "signing_secret" not in got

        sent = await resend.Emails.send_async(
            {"from": "hello@acme.test", "to": ["delivered@simulator.test"], "subject": "hook"}
            | {"text": "t"}
        )
        await eventually(lambda: len(receiver.requests) == 1, what="the signed delivery")
        request = receiver.requests[0]
        headers = _lower(request.headers)
        payload = resend.Webhooks.verify(
            {
                "payload": request.body.decode(),
                "headers": {
                    "id": headers["svix-id"],
                    "timestamp": headers["svix-timestamp"],
                    "signature": headers["svix-signature"],
                },
                "webhook_secret": secret,
            }
        )
        assert payload["type"] == "email.delivered"
        assert payload["data"]["email_id"] == sent["id"]  # type: ignore[typeddict-item]
        with pytest.raises(ValueError, match="no matching signature"):
            resend.Webhooks.verify(
                {
                    "payload": request.body.decode().replace("hook", "HOOK"),
                    "headers": {
                        "id": headers["webhook-id"],
                        "timestamp": headers["webhook-timestamp"],
                        "signature": headers["webhook-signature"],
                    },
                    "webhook_secret": secret,
                }
            )

        events = await resend.Webhooks.list_events_async(hook_id)
        [event] = events["data"]
        assert event["id"] == headers["svix-id"] and event["type"] == "email.delivered"

        async def settled() -> bool:
            one = await resend.Webhooks.get_event_async(hook_id, event["id"])
            return one["status"] == "delivered"

        await eventually(settled, what="the event's status")
        one = await resend.Webhooks.get_event_async(hook_id, event["id"])
        assert (one["object"], one["type"]) == ("webhook_event", "email.delivered")
        assert one["payload"]["data"]["email_id"] == sent["id"]  # type: ignore[typeddict-item]
        attempts = await resend.Webhooks.list_event_attempts_async(hook_id, event["id"])
        [attempt] = attempts["data"]
        assert (attempt["http_status_code"], dict(attempt)["success"]) == (200, True)
        assert attempt["sent_at"] and attempts["has_more"] is False

        replayed = await resend.Webhooks.replay_event_async(hook_id, event["id"])
        assert (replayed["object"], replayed["id"]) == ("webhook_event", event["id"])
        await eventually(lambda: len(receiver.requests) == 2, what="the replay")
        assert _lower(receiver.requests[1].headers)["svix-id"] == event["id"]

        # a page of events (limit, after), as the SDK asks
        await resend.Emails.send_async(
            {"from": "hello@acme.test", "to": ["delivered@simulator.test"], "subject": "2nd"}
            | {"text": "t"}
        )
        await eventually(lambda: len(receiver.requests) == 3, what="the second delivery")
        newest = await resend.Webhooks.list_events_async(hook_id, {"limit": 1})
        assert newest["has_more"] is True and newest["data"][0]["id"] != event["id"]
        older = await resend.Webhooks.list_events_async(
            hook_id, {"limit": 1, "after": newest["data"][0]["id"]}
        )
        assert [e["id"] for e in older["data"]] == [event["id"]] and older["has_more"] is False

        rotated = await resend.Webhooks.rotate_signing_secret_async(hook_id)
        assert rotated["id"] == hook_id and rotated["signing_secret"] != secret
        assert dict(rotated)["secret"] == rotated["signing_secret"]

        updated = await resend.Webhooks.update_async(
            {"webhook_id": hook_id, "status": "disabled", "events": ["email.sent"]}
        )
        assert updated["id"] == hook_id
        after = await resend.Webhooks.get_async(hook_id)
        assert (after["status"], after["events"]) == ("disabled", ["email.sent"])

        removed = await resend.Webhooks.remove_async(hook_id)
        assert (removed["id"], removed["deleted"]) == (hook_id, True)
        with pytest.raises(resend.exceptions.ResendError) as caught:
            await resend.Webhooks.get_async(hook_id)
        assert caught.value.code == 404


def test_webhooks_list_pages(sdk: RunningServer) -> None:
    endpoint = "https://93.184.216.34/hooks"  # a public address, never sent to: no event matches
    for i in range(4):
        resend.Webhooks.create({"endpoint": f"{endpoint}/{i}", "events": ["domain.deleted"]})
    made = [w["id"] for w in resend.Webhooks.list()["data"]]
    check_paging(resend.Webhooks.list, made)


def test_webhooks_status_and_signing_secret_rotation(sdk: RunningServer) -> None:
    created = resend.Webhooks.create(
        {"endpoint": "https://93.184.216.34/hooks", "events": ["email.sent"]}
    )
    hook_id = created["id"]
    updated = resend.Webhooks.update({"webhook_id": hook_id, "status": "disabled"})
    assert updated["id"] == hook_id
    got: dict[str, object] = dict(resend.Webhooks.get(hook_id))
    assert got["status"] == "disabled" and got["enabled"] is False
    rotated = resend.Webhooks.rotate_signing_secret(hook_id)
    assert rotated["id"] == hook_id and dict(rotated)["status"] == "disabled"
    assert rotated["signing_secret"].startswith("whsec_")
    assert rotated["signing_secret"] != created["signing_secret"]


# API keys


def test_api_keys(sdk: RunningServer) -> None:
    created = resend.ApiKeys.create({"name": "ci", "permission": "sending_access"})
    assert created["id"] and created["token"].startswith("ph_test_")
    listed = {k["id"]: k for k in resend.ApiKeys.list()["data"]}
    assert listed[created["id"]]["name"] == "ci" and "token" not in listed[created["id"]]

    updated = resend.ApiKeys.update({"id": created["id"], "name": "ci runner"})
    assert (updated["object"], updated["id"]) == ("api_key", created["id"])
    listed = {k["id"]: k for k in resend.ApiKeys.list()["data"]}
    assert listed[created["id"]]["name"] == "ci runner"

    # the new key sends, and is refused elsewhere (401 restricted_api_key: a ResendError)
    resend.api_key = created["token"]
    assert send("from a sending key")
    with pytest.raises(resend.exceptions.ResendError) as restricted:
        resend.ApiKeys.list()
    assert (restricted.value.code, restricted.value.error_type) == (401, "restricted_api_key")
    resend.api_key = sdk.test_key

    for i in range(2):
        resend.ApiKeys.create({"name": f"more-{i}"})
    check_paging(resend.ApiKeys.list, [k["id"] for k in resend.ApiKeys.list()["data"]])

    removed = resend.ApiKeys.remove(created["id"])
    assert (removed["object"], removed["id"], removed["deleted"]) == (
        "api_key",
        created["id"],
        True,
    )
    assert created["id"] not in {k["id"] for k in resend.ApiKeys.list()["data"]}
    resend.api_key = created["token"]
    with pytest.raises(resend.exceptions.InvalidApiKeyError):
        send("revoked")
    resend.api_key = sdk.test_key
    with pytest.raises(resend.exceptions.ResendError) as caught:
        resend.ApiKeys.update({"id": created["id"], "name": "back"})
    assert caught.value.code == 404


# Suppressions


def test_suppressions(sdk: RunningServer) -> None:
    address = f"gone-{uuid.uuid4().hex[:8]}@example.com"
    added = resend.Suppressions.add({"email": address})
    assert added["id"] and added["object"] == "suppression"
    by_email = resend.Suppressions.get(address)
    assert (by_email["id"], by_email["origin"]) == (added["id"], "manual")
    assert resend.Suppressions.get(added["id"])["email"] == address
    with pytest.raises(resend.exceptions.ValidationError):
        send("to a suppressed address", to=[address])
    more = [resend.Suppressions.add({"email": f"{i}-{address}"})["id"] for i in range(3)]
    listed = resend.Suppressions.list({"origin": "manual"})
    assert {added["id"], *more} <= {s["id"] for s in listed["data"]}
    order = [s["id"] for s in listed["data"]]  # newest first
    assert listed["has_more"] is False
    walked = pages(resend.Suppressions.list, 2)  # type: ignore[arg-type]
    assert [i for page in walked for i in page] == order
    with pytest.raises(resend.exceptions.ValidationError):  # page forwards only
        resend.Suppressions.list({"limit": 2, "before": order[-1]})
    removed = resend.Suppressions.remove(address)
    assert (removed["id"], removed["deleted"]) == (added["id"], True)
    assert send("to a removed address", to=[address])
    batch = [f"batch{i}-{address}" for i in range(3)]
    added_many = resend.Suppressions.Batch.add({"emails": batch})
    assert [s["email"] for s in added_many["data"]] == batch
    assert resend.Suppressions.get(batch[0])["id"] == added_many["data"][0]["id"]
    gone = resend.Suppressions.Batch.remove({"emails": batch[:2]})
    assert {g["id"] for g in gone["data"]} == {s["id"] for s in added_many["data"][:2]}
    again = resend.Suppressions.Batch.remove({"ids": [added_many["data"][2]["id"]]})
    assert [g["deleted"] for g in again["data"]] == [True]
    with pytest.raises(resend.exceptions.ResendError) as missing:
        resend.Suppressions.get(batch[2])
    assert missing.value.code == 404


# Errors


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
    resend.api_key = sdk.live_key
    with pytest.raises(resend.exceptions.ResendError) as caught:
        send("live")
    assert (caught.value.code, caught.value.error_type) == (403, "domain_not_verified")


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
