"""Every record serializer's output, for realistic records, is what ``/openapi.json`` says the
route serving it returns (besides the check of every answer of the API tests: conftest)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest

from posthaste.core import serialize, webhooks
from tests import records
from tests.conftest import Tenant
from tests.openapi_check import problems, response_schema

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])  # the document is the same on both

Shape = Callable[[dict[str, Any]], dict[str, Any]]


def alone(record: dict[str, Any]) -> dict[str, Any]:
    return record


def listed(record: dict[str, Any]) -> dict[str, Any]:
    return {"object": "list", "data": [record]}


def paged(record: dict[str, Any]) -> dict[str, Any]:
    return {"object": "list", "data": [record], "next_cursor": ""}


def more(record: dict[str, Any]) -> dict[str, Any]:
    return {"object": "list", "data": [record], "has_more": False}


def paged_more(record: dict[str, Any]) -> dict[str, Any]:
    return {**paged(record), "has_more": True}


def contact_topics(record: dict[str, Any]) -> dict[str, Any]:
    return {"object": "list", "id": records.TEAM, "data": [record], "has_more": False}


def summary(run: Any) -> dict[str, Any]:
    return serialize.run_record(run, with_steps=False)


def with_secret(record: dict[str, Any]) -> dict[str, Any]:
    secret = "whsec_" + "0" * 48
    return {**record, "secret": secret, "signing_secret": secret}


def received_summary(item: Any) -> dict[str, Any]:
    return serialize.received_email_record(item)


def received_record(item: Any) -> dict[str, Any]:
    return serialize.received_email_record(item, ("http://x.test/received-raw/t", records.T0))


RECEIVED_ONE = "GET /emails/received/{email_id} 200"
RESEND_ONE = "GET /emails/receiving/{email_id} 200"

# (serializer, its records, how a route wraps it, the route: method, path template, status)
SERVED: list[tuple[Callable[[Any], dict[str, Any]], Callable[[], Sequence[Any]], Shape, str]] = [
    (serialize.email_record, records.emails, alone, "GET /emails/{email_id} 200"),
    (serialize.email_record, records.emails, alone, "POST /emails 200"),
    (serialize.email_record, records.emails, paged_more, "GET /emails 200"),
    (serialize.event_record, records.events, listed, "GET /emails/{email_id}/events 200"),
    (
        serialize.attachment_record,
        records.attachments,
        more,
        "GET /emails/{email_id}/attachments 200",
    ),
    (
        serialize.attempt_record,
        records.delivery_attempts,
        listed,
        "GET /emails/{email_id}/attempts 200",
    ),
    (received_record, records.received_emails, alone, RECEIVED_ONE),
    (received_record, records.received_emails, alone, RESEND_ONE),
    (received_summary, records.received_emails, paged_more, "GET /emails/received 200"),
    (received_summary, records.received_emails, paged_more, "GET /emails/receiving 200"),
    (serialize.stream_record, records.streams, alone, "GET /streams/{stream_id} 200"),
    (serialize.stream_record, records.streams, listed, "GET /streams 200"),
    (
        serialize.suppression_record,
        records.suppressions,
        alone,
        "GET /suppressions/{id_or_email} 200",
    ),
    (serialize.suppression_record, records.suppressions, paged_more, "GET /suppressions 200"),
    (serialize.template_record, records.templates, alone, "GET /templates/{template_id} 200"),
    (serialize.template_record, records.templates, more, "GET /templates 200"),
    (serialize.contact_record, records.contacts, alone, "GET /contacts/{id_or_email} 200"),
    (serialize.contact_record, records.contacts, alone, "POST /contacts 201"),
    (serialize.contact_record, records.contacts, more, "GET /contacts 200"),
    (serialize.contact_record, records.contacts, more, "GET /segments/{segment_id}/contacts 200"),
    (
        serialize.contact_import_record,
        records.contact_imports,
        alone,
        "GET /contacts/imports/{import_id} 200",
    ),
    (serialize.contact_import_record, records.contact_imports, alone, "POST /contacts/imports 202"),
    (serialize.contact_import_record, records.contact_imports, more, "GET /contacts/imports 200"),
    (serialize.segment_record, records.segments, alone, "GET /segments/{segment_id} 200"),
    (serialize.segment_record, records.segments, more, "GET /segments 200"),
    (serialize.segment_record, records.segments, more, "GET /contacts/{contact_id}/segments 200"),
    (serialize.topic_record, records.topics, alone, "GET /topics/{topic_id} 200"),
    (serialize.topic_record, records.topics, more, "GET /topics 200"),
    (
        serialize.contact_topic_record,
        records.contact_topics,
        contact_topics,
        "GET /contacts/{contact_id}/topics 200",
    ),
    (serialize.broadcast_record, records.broadcasts, alone, "GET /broadcasts/{broadcast_id} 200"),
    (serialize.broadcast_record, records.broadcasts, alone, "POST /broadcasts 201"),
    (serialize.broadcast_record, records.broadcasts, more, "GET /broadcasts 200"),
    (
        serialize.broadcast_record,
        records.broadcasts,
        alone,
        "POST /broadcasts/{broadcast_id}/cancel 200",
    ),
    (serialize.automation_record, records.automations, alone, "POST /automations 201"),
    (serialize.automation_record, records.automations, more, "GET /automations 200"),
    (
        serialize.automation_record,
        records.automations,
        alone,
        "PATCH /automations/{automation_id} 200",
    ),
    (
        serialize.run_record,
        records.automation_runs,
        alone,
        "GET /automations/{automation_id}/runs/{run_id} 200",
    ),
    (summary, records.automation_runs, more, "GET /automations/{automation_id}/runs 200"),
    (serialize.event_definition_record, records.event_definitions, alone, "POST /events 201"),
    (serialize.event_definition_record, records.event_definitions, more, "GET /events 200"),
    (
        serialize.event_definition_record,
        records.event_definitions,
        alone,
        "GET /events/{event_ref} 200",
    ),
    (
        serialize.event_definition_record,
        records.event_definitions,
        alone,
        "PATCH /events/{event_ref} 200",
    ),
    (serialize.domain_record, records.domains, alone, "GET /domains/{domain_id} 200"),
    (serialize.domain_record, records.domains, more, "GET /domains 200"),
    (webhooks.webhook_record, records.webhooks, alone, "GET /webhooks/{webhook_id} 200"),
    (webhooks.webhook_record, records.webhooks, with_secret, "POST /webhooks 201"),
    (webhooks.webhook_record, records.webhooks, more, "GET /webhooks 200"),
    (
        webhooks.webhook_record,
        records.webhooks,
        with_secret,
        "POST /webhooks/{webhook_id}/signing-secret/rotate 200",
    ),
    (
        webhooks.delivery_record,
        records.webhook_deliveries,
        more,
        "GET /webhooks/{webhook_id}/events 200",
    ),
    (
        webhooks.delivery_record,
        records.webhook_deliveries,
        alone,
        "POST /webhooks/{webhook_id}/events/{event_id}/replay 200",
    ),
    (
        webhooks.delivery_record,
        records.webhook_deliveries,
        alone,
        "GET /webhooks/{webhook_id}/events/{event_id} 200",
    ),
    (
        webhooks.attempt_record,
        records.webhook_attempts,
        more,
        "GET /webhooks/{webhook_id}/events/{event_id}/attempts 200",
    ),
]


@pytest.fixture
async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    found: dict[str, Any] = (await client.get("/openapi.json")).json()
    return found


@pytest.mark.parametrize(
    ("serializer", "examples", "shape", "route"),
    SERVED,
    ids=[f"{s.__name__}:{route}" for s, _, _, route in SERVED],
)
async def test_serialized_records_are_documented(
    document: dict[str, Any],
    serializer: Callable[[Any], dict[str, Any]],
    examples: Callable[[], Sequence[Any]],
    shape: Shape,
    route: str,
) -> None:
    method, template, status = route.split()
    schema = response_schema(document, method, template, int(status))
    assert schema is not None, f"{route} documents no JSON body"
    for example in examples():
        body = shape(serializer(example))
        assert problems(document, schema, body) == [], (route, example)


async def test_api_keys_are_documented(client: httpx.AsyncClient, tenant: Tenant) -> None:
    """The key record is built in its route: every answer below is checked by the client."""
    headers = tenant.headers("live")
    bodies = [
        {"name": "ci"},
        {"name": "sender", "permission": "sending_access", "mode": "test"},
    ]
    for body in bodies:
        created = await client.post("/api-keys", json=body, headers=headers)
        assert created.status_code == 201 and created.json()["token"].startswith("ph_")
    listing = await client.get("/api-keys", headers=headers)
    assert {k["permission"] for k in listing.json()["data"]} == {"full_access", "sending_access"}
    first = listing.json()["data"][0]["id"]
    assert (await client.get("/api-keys?limit=1", headers=headers)).json()["has_more"] is True
    renamed = await client.patch(f"/api-keys/{first}", json={"name": "new"}, headers=headers)
    assert renamed.status_code == 200 and renamed.json()["name"] == "new"
