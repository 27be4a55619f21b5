"""The dashboard over HTTP (in-process ASGI) on SQLite and PostgreSQL: sign-in, the CSRF check
of its forms, and team isolation exactly as in the API."""

from __future__ import annotations

import asyncio
import re

import httpx

from posthaste.bootstrap import Services
from posthaste.core.ids import format_ms, now_ms
from posthaste.ui.live import StreamTokens
from posthaste.ui.routes.live import EMAIL_EVENTS
from tests.apps import make_app
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body

TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(page: httpx.Response) -> str:
    found = TOKEN.search(page.text)
    assert found, page.text
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, key: str) -> httpx.Response:
    form = await client.get("/ui/sign-in")
    assert form.status_code == 200 and "text/html" in form.headers["content-type"]
    return await client.post("/ui/sign-in", data={"api_key": key, "csrf_token": csrf_of(form)})


async def test_sign_in_takes_a_full_access_key_only(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert (await client.get("/ui/emails")).status_code == 303  # to the sign-in form
    bad = await sign_in(client, "ph_live_" + "x" * 32)
    assert bad.status_code == 401 and "not valid" in bad.text
    sending = await sign_in(client, tenant.sending)
    assert sending.status_code == 403 and "sending access only" in sending.text
    assert "posthaste_session" not in client.cookies
    assert (await client.get("/ui/emails")).status_code == 303

    signed = await sign_in(client, tenant.live)
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/emails"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert tenant.live not in cookie  # sealed, not the key in clear
    page = await client.get("/ui/emails")
    assert page.status_code == 200 and tenant.team.name in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]

    out = await client.post("/ui/sign-out", data={"csrf_token": csrf_of(page)})
    assert out.status_code == 303
    assert (await client.get("/ui/emails")).status_code == 303


async def test_a_sign_in_form_needs_its_own_token(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    # Login CSRF: a form posted from elsewhere cannot sign this browser in to someone's team.
    forged = await client.post("/ui/sign-in", data={"api_key": tenant.live, "csrf_token": "x"})
    assert forged.status_code == 403 and "posthaste_session" not in client.cookies


async def test_another_teams_email_is_not_found(
    services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    sent = await client.post("/emails", json=email_body(html="<p>A</p>"), headers=tenant.headers())
    email_id = sent.json()["id"]
    other = await make_tenant(services)
    assert (await sign_in(client, other.live)).status_code == 303
    for path in (f"/ui/emails/{email_id}", f"/ui/emails/{email_id}/html"):
        page = await client.get(path)
        assert page.status_code == 404, path
        assert "not found" in page.text and "<p>A</p>" not in page.text
    listing = await client.get("/ui/emails")
    assert email_id not in listing.text

    client.cookies.clear()
    assert (await sign_in(client, tenant.live)).status_code == 303
    own = await client.get(f"/ui/emails/{email_id}")
    assert own.status_code == 200 and email_id in own.text
    framed = await client.get(f"/ui/emails/{email_id}/html")
    assert framed.text == "<p>A</p>"
    policy = framed.headers["content-security-policy"]
    assert "sandbox" in policy and "img-src data: cid:" in policy and "script-src" not in policy


async def test_a_forged_post_changes_nothing(
    services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert (await sign_in(client, tenant.live)).status_code == 303
    page = await client.get("/ui/suppressions")
    token = csrf_of(page)
    for forged in ({}, {"csrf_token": ""}, {"csrf_token": "0" * len(token)}):
        answer = await client.post("/ui/suppressions", data={"email": "x@example.com", **forged})
        assert answer.status_code == 403, answer.text
    listed = await client.get("/suppressions", headers=tenant.headers())
    assert listed.json()["data"] == []
    # A token of another session (another browser, same key) is no good either.
    other = httpx.AsyncClient(transport=client._transport, base_url=str(client.base_url))
    async with other:
        assert (await sign_in(other, tenant.live)).status_code == 303
        foreign = csrf_of(await other.get("/ui/suppressions"))
    answer = await client.post(
        "/ui/suppressions", data={"email": "x@example.com", "csrf_token": foreign}
    )
    assert answer.status_code == 403
    added = await client.post(
        "/ui/suppressions", data={"email": "x@example.com", "csrf_token": token}
    )
    assert added.status_code == 303
    listed = await client.get("/suppressions", headers=tenant.headers())
    assert [s["email"] for s in listed.json()["data"]] == ["x@example.com"]


async def test_pages_stay_out_of_the_api_document(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    assert not [path for path in document["paths"] if path.startswith("/ui")]
    missing = await client.get("/ui/no-such-page")
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]


async def _team_a_resources(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, str]:
    """One of each resource the dashboard shows, made through the API; their ids."""
    headers = tenant.headers()

    async def made(path: str, body: dict[str, object]) -> str:
        answer = await client.post(path, json=body, headers=headers)
        assert answer.status_code in (200, 201), answer.text
        return str(answer.json()["id"])

    hook = await made(
        "/webhooks", {"endpoint": "https://93.184.216.34/hook", "events": ["email.queued"]}
    )
    template = {
        "name": "Welcome",
        "subject": "Hi {{ first_name }}",
        "html": "<p>Plan {{ plan }}</p>",
        "variables": [{"key": "plan", "fallback_value": "Free"}],
    }
    ids = {
        "domain": await made("/domains", {"name": "acme.test"}),
        "webhook": hook,
        "template": await made("/templates", template),
        "email": await made("/emails", email_body(subject="Invoice 7", html="<b>x</b>")),
    }
    segment = await made("/segments", {"name": "S"})
    await made(
        "/broadcasts",
        {"audience_id": segment, "from": "a@acme.test", "subject": "News", "text": "x",
         "name": "Weekly"},
    )  # fmt: skip
    events = await client.get(f"/webhooks/{hook}/events", headers=headers)
    ids["event"] = events.json()["data"][0]["id"]
    return ids


async def test_every_page_shows_the_teams_own_resources_only(
    services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    ids = await _team_a_resources(client, tenant)
    pages = {
        "/ui/domains": "acme.test",
        f"/ui/domains/{ids['domain']}": "DKIM",
        "/ui/webhooks": "93.184.216.34",
        f"/ui/webhooks/{ids['webhook']}": "email.queued",
        f"/ui/webhooks/{ids['webhook']}/events/{ids['event']}": "Replay this event",
        "/ui/templates": "Welcome",
        f"/ui/templates/{ids['template']}": "Hi {{ first_name }}",
        f"/ui/templates/{ids['template']}/preview.html": "<p>Plan Free</p>",
        "/ui/broadcasts": "Weekly",
        "/ui/emails": "Invoice 7",
        f"/ui/emails/{ids['email']}": "email.queued",
        "/ui/suppressions": "No suppressed addresses",
        "/ui/received": "No mail received",
    }
    assert (await sign_in(client, tenant.live)).status_code == 303
    for path, shown in pages.items():
        page = await client.get(path)
        assert page.status_code == 200, (path, page.text)
        assert shown in page.text, path

    client.cookies.clear()
    other = await make_tenant(services)
    assert (await sign_in(client, other.live)).status_code == 303
    for path, shown in pages.items():
        page = await client.get(path)
        if path.count("/") > 2:  # one resource's page: not found, like a missing id
            assert page.status_code == 404, path
        assert shown not in page.text or shown.startswith("No "), path
    replay = f"/ui/webhooks/{ids['webhook']}/events/{ids['event']}/replay"
    token = csrf_of(await client.get("/ui/emails"))
    assert (await client.post(replay, data={"csrf_token": token})).status_code == 404
    assert (await client.get(replay)).status_code == 404  # a page only POSTs reach
    verify = f"/ui/domains/{ids['domain']}/verify"
    assert (await client.post(verify, data={"csrf_token": token})).status_code == 404


async def test_the_email_list_takes_the_apis_filters(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    for n in range(3):
        sent = await client.post(
            "/emails", json=email_body(subject=f"Report {n}", to=[f"r{n}@example.com"]),
            headers=tenant.headers(),
        )  # fmt: skip
        assert sent.status_code == 200
    assert (await sign_in(client, tenant.live)).status_code == 303
    page = await client.get("/ui/emails", params={"to": "R1@example.com"})
    assert "Report 1" in page.text and "Report 0" not in page.text
    page = await client.get("/ui/emails", params={"subject": "report", "status": "canceled"})
    assert "Report" not in page.text.replace("<h1>", "")
    bad = await client.get("/ui/emails", params={"status": "lost"})
    assert bad.status_code == 422 and "Unknown status" in bad.text


async def test_revoking_the_key_ends_its_sessions(
    services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert (await sign_in(client, tenant.live)).status_code == 303
    assert (await client.get("/ui/suppressions")).status_code == 200
    keys = (await client.get("/api-keys", headers=tenant.headers())).json()["data"]
    live = next(k for k in keys if k["name"] == "live")
    revoked = await client.delete(f"/api-keys/{live['id']}", headers=tenant.headers())
    assert revoked.status_code == 200
    after = await client.get("/ui/suppressions")
    assert after.status_code == 303 and after.headers["location"].startswith("/ui/sign-in")
    stream = await client.get("/ui/events/stream")
    assert stream.status_code == 303  # no session, no events


async def test_the_cookie_is_secure_over_https(services: Services, tenant: Tenant) -> None:
    transport = httpx.ASGITransport(app=make_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="https://posthaste.test") as https:
        answer = await sign_in(https, tenant.live)
    assert answer.status_code == 303
    assert "Secure" in answer.headers["set-cookie"]


async def test_an_email_is_canceled_from_its_page_once(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    later = format_ms(now_ms() + 86_400_000)
    sent = await client.post(
        "/emails", json=email_body(scheduled_at=later), headers=tenant.headers()
    )
    email_id = sent.json()["id"]
    assert (await sign_in(client, tenant.live)).status_code == 303
    page = await client.get(f"/ui/emails/{email_id}")
    assert "Cancel this email" in page.text
    path = f"/ui/emails/{email_id}/cancel"
    answer = await client.post(path, data={"csrf_token": csrf_of(page)})
    assert answer.status_code == 303 and answer.headers["location"].endswith("notice=canceled")
    status = (await client.get(f"/emails/{email_id}", headers=tenant.headers())).json()["status"]
    assert status == "canceled"
    page = await client.get(f"/ui/emails/{email_id}")
    assert "Cancel this email" not in page.text and "email.canceled" in page.text
    again = await client.post(path, data={"csrf_token": csrf_of(page)})
    assert again.status_code == 409 and "this one is canceled" in again.text


async def test_a_disabled_webhook_offers_no_replay(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    ids = await _team_a_resources(client, tenant)
    hook = ids["webhook"]
    off = await client.patch(f"/webhooks/{hook}", json={"enabled": False}, headers=tenant.headers())
    assert off.status_code == 200
    assert (await sign_in(client, tenant.live)).status_code == 303
    page = await client.get(f"/ui/webhooks/{hook}/events/{ids['event']}")
    assert "Replay this event" not in page.text and "This webhook is disabled" in page.text
    replay = f"/ui/webhooks/{hook}/events/{ids['event']}/replay"
    refused = await client.post(replay, data={"csrf_token": csrf_of(page)})
    assert refused.status_code == 409 and "disabled" in refused.text


async def test_a_pages_stream_token_replays_what_came_after_the_page(
    services: Services, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    tokens = StreamTokens(services.settings.secret_key)
    stream = services.event_stream
    token = tokens.issue(tenant.team.id, await stream.start(tenant.team.id, None), now_ms())
    sent = await client.post("/emails", json=email_body(), headers=tenant.headers())
    start = tokens.read(token, tenant.team.id, now_ms())
    assert start is not None
    frames = stream.frames(tenant.team.id, start, EMAIL_EVENTS)
    try:
        assert await anext(frames) == b"retry: 2000\n\n"
        frame = await asyncio.wait_for(anext(frames), 30)
    finally:
        await frames.aclose()
    assert b"event: email.queued" in frame and sent.json()["id"].encode() in frame
