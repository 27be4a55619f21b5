"""Sending with templates through the one send path, over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from tests.apps import make_app
from tests.conftest import Tenant, make_tenant
from tests.integration.test_api_emails import assert_error
from tests.integration.test_api_templates import WELCOME, create
from tests.openapi_check import checked_client
from tests.senders import AnySender

SENDER = {"from": "Acme <hello@acme.test>", "to": "user@example.com"}


async def send(
    client: httpx.AsyncClient, tenant: Tenant, which: str = "test", **fields: Any
) -> httpx.Response:
    return await client.post("/emails", json={**SENDER, **fields}, headers=tenant.headers(which))


async def sent(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    response = await send(client, tenant, **fields)
    assert response.status_code == 200, response.text
    record: dict[str, Any] = response.json()
    return record


async def email_count(client: httpx.AsyncClient, tenant: Tenant) -> int:
    return len((await client.get("/emails", headers=tenant.headers())).json()["data"])


async def test_send_by_alias_renders_with_escaping_and_fallbacks(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    template = await create(client, tenant)
    record = await sent(client, tenant, template="welcome", data={"first_name": "<Ann & Bo>"})
    assert record["subject"] == "Welcome, <Ann & Bo>"
    assert record["html"] == "<p>Hi &lt;Ann &amp; Bo&gt;, your plan is Free.</p>"
    assert record["text"] == "Hi <Ann & Bo>"
    assert record["template_id"] == template["id"]
    fetched = (await client.get(f"/emails/{record['id']}", headers=tenant.headers())).json()
    assert fetched["html"] == record["html"] and fetched["template_id"] == template["id"]


@pytest.mark.parametrize("form", ["template", "template_id", "resend", "resend_alias"])
async def test_every_way_of_naming_the_template(
    client: httpx.AsyncClient, tenant: Tenant, form: str
) -> None:
    template = await create(client, tenant)
    data = {"first_name": "Ann", "plan": {"name": "Pro"}}
    reference: dict[str, Any] = {
        "template": {"template": template["id"], "data": data},
        "template_id": {"template_id": template["id"], "data": data},
        "resend": {"template": {"id": template["id"], "variables": data}},
        "resend_alias": {"template": {"id": "WELCOME", "variables": data}},
    }[form]
    record = await sent(client, tenant, **reference)
    assert record["subject"] == "Welcome, Ann" and record["html"].endswith("plan is Pro.</p>")


async def test_unknown_template_is_named_in_a_422(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    other = await make_tenant(services)
    theirs = await create(client, other)
    for reference in ("nope", theirs["id"], "welcome"):
        response = await send(client, tenant, template=reference, data={"first_name": "A"})
        payload = assert_error(response, 422, "validation_error")
        assert reference in payload["message"]
    assert await email_count(client, tenant) == 0


async def test_missing_variables_are_all_named(client: httpx.AsyncClient, tenant: Tenant) -> None:
    await create(
        client,
        tenant,
        subject="{{ a }} {{ b.c }}",
        html="{{{ d }}} {{ plan.name }}",
        text="{{ a }} {{ e }}",
    )
    response = await send(client, tenant, template="welcome", data={"b": {"x": 1}, "e": None})
    message = assert_error(response, 422, "validation_error")["message"]
    assert "a, b.c, d, e" in message and "plan.name" not in message
    assert await email_count(client, tenant) == 0


async def test_a_subject_value_cannot_inject_headers(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await create(client, tenant)
    response = await send(
        client, tenant, template="welcome", data={"first_name": "x\r\nBcc: victim@example.com"}
    )
    message = assert_error(response, 422, "validation_error")["message"]
    assert "subject" in message and "first_name" in message
    assert await email_count(client, tenant) == 0


async def test_explicit_fields_override_and_are_rendered(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await create(client, tenant)
    record = await sent(
        client,
        tenant,
        template="welcome",
        subject="Custom for {{ first_name }}",
        html="<b>{{ first_name }}</b> {{{ first_name }}}",
        data={"first_name": "<i>"},
    )
    assert record["subject"] == "Custom for <i>"
    assert record["html"] == "<b>&lt;i&gt;</b> <i>"
    assert record["text"] == "Hi <i>"  # not overridden: the template's, rendered


async def test_template_without_subject_needs_one_in_the_send(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await create(client, tenant, subject=None)
    response = await send(client, tenant, template="welcome", data={"first_name": "A"})
    assert "subject" in assert_error(response, 422, "validation_error")["message"]
    record = await sent(
        client, tenant, template="welcome", subject="Hi {{ first_name }}", data={"first_name": "A"}
    )
    assert record["subject"] == "Hi A"


async def test_content_without_template(client: httpx.AsyncClient, tenant: Tenant) -> None:
    as_is = await sent(client, tenant, subject="{{ x }}", html="<p>{{ x }}</p>")
    assert as_is["subject"] == "{{ x }}" and as_is["html"] == "<p>{{ x }}</p>"
    rendered = await sent(
        client, tenant, subject="{{ x }}", html="<p>{{ x }}</p>", text="{{x}}", data={"x": "<y>"}
    )
    assert rendered["subject"] == "<y>" and rendered["html"] == "<p>&lt;y&gt;</p>"
    assert rendered["text"] == "<y>" and rendered["template_id"] is None
    missing = await send(client, tenant, subject="{{ x }}", text="{{ z }}", data={"x": 1})
    assert "z" in assert_error(missing, 422, "validation_error")["message"]


async def test_later_edits_do_not_change_accepted_mail(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    template = await create(client, tenant)
    record = await sent(client, tenant, template="welcome", data={"first_name": "A"})
    await client.patch(
        f"/templates/{template['id']}", json={"subject": "Changed"}, headers=tenant.headers()
    )
    await client.delete(f"/templates/{template['id']}", headers=tenant.headers())
    fetched = (await client.get(f"/emails/{record['id']}", headers=tenant.headers())).json()
    assert fetched["subject"] == "Welcome, A" and fetched["template_id"] == template["id"]


async def test_test_keys_send_the_latest_draft(client: httpx.AsyncClient, tenant: Tenant) -> None:
    template = await create(client, tenant)
    await client.post(f"/templates/{template['id']}/publish", headers=tenant.headers())
    await client.patch(
        f"/templates/{template['id']}", json={"subject": "Draft"}, headers=tenant.headers()
    )
    record = await sent(client, tenant, template="welcome", data={"first_name": "A"})
    assert record["subject"] == "Draft"


async def test_live_send_with_a_never_published_template_is_refused(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await create(client, tenant)
    response = await send(client, tenant, "live", template="welcome", data={"first_name": "A"})
    assert_error(response, 422, "template_not_published")
    # Once published, the template check passes and the next check (the domain) answers.
    await client.post("/templates/welcome/publish", headers=tenant.headers())
    response = await send(client, tenant, "live", template="welcome", data={"first_name": "A"})
    assert_error(response, 403, "domain_not_verified")


@pytest.fixture
async def live_client(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    built = build_services(settings, senders=AnySender("us-east-1"))
    try:
        async with checked_client(make_app(built)) as http:
            yield http, built
    finally:
        await built.close()


async def test_live_keys_send_the_published_version(
    live_client: tuple[httpx.AsyncClient, Services], services: Services
) -> None:
    client, built = live_client
    tenant = await make_tenant(built)
    template = await create(client, tenant)
    path = f"/templates/{template['id']}"
    await client.post(f"{path}/publish", headers=tenant.headers())
    await client.patch(path, json={"subject": "Unpublished"}, headers=tenant.headers())
    live = await send(client, tenant, "live", template="welcome", data={"first_name": "A"})
    assert live.status_code == 200, live.text
    assert live.json()["subject"] == "Welcome, A"
    await client.post(f"{path}/publish", headers=tenant.headers())
    live = await send(client, tenant, "live", template="welcome", data={"first_name": "A"})
    assert live.json()["subject"] == "Unpublished"


async def test_batch_items_render_and_fail_independently(
    client: httpx.AsyncClient, services: Services, tenant: Tenant
) -> None:
    template = await create(client, tenant)
    queries: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM templates" in statement:
            queries.append(statement)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    items = [{**SENDER, "template": "welcome", "data": {"first_name": f"n{i}"}} for i in range(100)]
    items[3] = {**SENDER, "template": "welcome", "data": {}}
    items[7] = {**SENDER, "template": "missing-one", "data": {"first_name": "x"}}
    items[9] = {**SENDER, "template_id": template["id"], "data": {"first_name": "by id"}}
    try:
        response = await client.post("/emails/batch", json=items, headers=tenant.headers())
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert response.status_code == 200, response.text
    entries = response.json()["data"]
    assert entries[3]["error"]["name"] == "validation_error"
    assert "first_name" in entries[3]["error"]["message"]
    assert "missing-one" in entries[7]["error"]["message"]
    assert sum("id" in entry for entry in entries) == 98
    assert len(queries) == 3  # welcome, missing-one and the id: one lookup each
    fetched = await client.get(f"/emails/{entries[9]['id']}", headers=tenant.headers())
    assert fetched.json()["subject"] == "Welcome, by id"
    fetched = await client.get(f"/emails/{entries[42]['id']}", headers=tenant.headers())
    assert fetched.json()["subject"] == "Welcome, n42"


async def test_template_with_only_text(client: httpx.AsyncClient, tenant: Tenant) -> None:
    await create(client, tenant, html=None, text="Plain {{ first_name }} <b>")
    record = await sent(client, tenant, template="welcome", data={"first_name": "<x>"})
    assert record["html"] is None and record["text"] == "Plain <x> <b>"


async def test_values_of_every_json_type(client: httpx.AsyncClient, tenant: Tenant) -> None:
    await create(
        client,
        tenant,
        subject="{{ n }} {{ f }} {{ t }} {{ items.1 }}",
        html="{{ obj }}",
        text="{{ list }}",
        variables=[],
    )
    record = await sent(
        client,
        tenant,
        template=WELCOME["alias"],
        data={"n": 3, "f": 3.5, "t": True, "items": ["a", "b"], "obj": {"k": "<"}, "list": [1]},
    )
    assert record["subject"] == "3 3.5 true b"
    assert record["html"] == "{&quot;k&quot;:&quot;&lt;&quot;}" and record["text"] == "[1]"
