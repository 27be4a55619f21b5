"""The dashboard in a real browser (Debian's headless Chromium, driven by Playwright).

One server for the module, on a thread of its own: the API with the dashboard (uvicorn), a
worker delivering through ``smtp://`` to a loopback sink (so attempts have real transcripts),
and the webhook dispatcher posting to a loopback receiver. SQLite: what the browser tests is
the pages; the integration tests run the same routes on both databases.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, Page, Playwright, Route, expect, sync_playwright

from posthaste.bootstrap import build_services
from posthaste.config import Settings
from posthaste.config.settings import DeliveryTarget
from tests.apps import make_app
from tests.conftest import SECRET, Tenant, make_tenant
from tests.helpers import email_body, until
from tests.senders import AnySender
from tests.smtp_sink import Sink, running_sink
from tests.webhook_receiver import Received, Receiver, running_receiver

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
WAIT_MS = 20_000
T = TypeVar("T")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() and os.environ.get("CI") != "true",
    reason="Debian's chromium is not installed (.ci/run installs it)",
)


@dataclass
class Dashboard:
    url: str
    team_a: Tenant
    team_b: Tenant
    sink: Sink
    receiver: Receiver
    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the server's loop (the sink and receiver live there)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(60)

    def api(self, method: str, path: str, tenant: Tenant, **options: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {tenant.live}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **options)

    def email_status(self, email_id: str) -> str:
        answer = self.api("GET", f"/emails/{email_id}", self.team_a)
        return str(answer.json()["status"])


async def _serve(
    data_dir: Path, template: Path, started: list[Dashboard], ready: threading.Event
) -> None:
    shutil.copy(template, data_dir / "posthaste.db")
    async with running_sink() as sink, running_receiver() as receiver:
        settings = Settings(
            database_url=f"sqlite:///{data_dir / 'posthaste.db'}",
            data_dir=data_dir,
            secret_key=SECRET,
            delivery=DeliveryTarget(kind="smtp", host="127.0.0.1", port=sink.port, tls="none"),
            webhook_allow_private=True,
        )
        services = build_services(settings, senders=AnySender(settings.default_region))
        await services.db.start_listening()
        # Listening before uvicorn serves: a browser's first connection waits in the backlog.
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(make_app(services), log_level="warning", lifespan="off")
        )
        worker, dispatcher = services.make_worker(), services.make_webhook_dispatcher()
        tasks = [
            asyncio.create_task(server.serve(sockets=[listener])),
            asyncio.create_task(worker.run()),
            asyncio.create_task(dispatcher.run()),
        ]
        try:
            dashboard = Dashboard(
                f"http://127.0.0.1:{port}",
                await make_tenant(services, "Team A"),
                await make_tenant(services, "Team B"),
                sink,
                receiver,
                asyncio.get_running_loop(),
            )
            started.append(dashboard)
            ready.set()
            await dashboard.stop.wait()
        finally:
            server.should_exit = True
            worker.stop()
            dispatcher.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            await services.close()


@pytest.fixture(scope="module")
def dashboard(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[Dashboard]:
    data_dir = tmp_path_factory.mktemp("dashboard")
    started: list[Dashboard] = []
    ready = threading.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(_serve(data_dir, sqlite_template, started, ready))
        except BaseException as exc:  # reported by the fixture, not lost on the thread
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=serve, name="dashboard-server", daemon=True)
    thread.start()
    assert ready.wait(60), "the dashboard server did not start"
    if failure:
        raise failure[0]
    yield started[0]
    started[0].loop.call_soon_threadsafe(started[0].stop.set)
    thread.join(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        yield _launch(playwright)


def _launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
    )


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    yield opened
    context.close()


def sign_in(page: Page, dashboard: Dashboard, key: str) -> None:
    page.goto(dashboard.url + "/ui/sign-in")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def send(dashboard: Dashboard, **overrides: Any) -> str:
    answer = dashboard.api("POST", "/emails", dashboard.team_a, json=email_body(**overrides))
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def test_sign_in_refuses_bad_and_sending_keys(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/ui/emails")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))
    sign_in(page, dashboard, "ph_live_" + "0" * 32)
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    sign_in(page, dashboard, dashboard.team_a.sending)
    expect(page.get_by_role("alert")).to_contain_text("sending access only")
    assert not [c for c in page.context.cookies() if c["name"] == "posthaste_session"]

    sign_in(page, dashboard, dashboard.team_a.live)
    expect(page.get_by_role("heading", name="Emails")).to_be_visible()
    expect(page.get_by_text("Team A")).to_be_visible()
    session = next(c for c in page.context.cookies() if c["name"] == "posthaste_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.goto(dashboard.url + "/ui/emails")
    expect(page).to_have_url(re.compile(r"/ui/sign-in"))


def test_email_list_filters_and_an_emails_page(page: Page, dashboard: Dashboard) -> None:
    pixel = f"{dashboard.url}/healthz?pixel"  # would answer, were it fetched
    html = (
        f"<p>Hello <b>reader</b></p><img src='{pixel}' alt='pixel'>"
        "<script>document.body.setAttribute('data-ran', 'yes')</script>"
    )
    invoice = send(dashboard, subject="Invoice 42", html=html, text="Hello reader")
    send(dashboard, subject="Weekly digest", to=["digest@example.com"])
    until(lambda: dashboard.email_status(invoice) == "sent", "the invoice to be sent")

    refused: dict[str, str | None] = {}
    page.on("requestfailed", lambda request: refused.update({request.url: request.failure}))
    sign_in(page, dashboard, dashboard.team_a.live)
    page.get_by_label("Subject contains").fill("invoice")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("#emails tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Invoice 42")
    page.get_by_label("Subject contains").fill("")
    page.get_by_label("To", exact=True).fill("digest@example.com")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Weekly digest")
    page.get_by_label("To", exact=True).fill("")
    page.get_by_label("Status").select_option("sent")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#emails")).to_contain_text("Invoice 42")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "emails-list.png"), full_page=True)
    page.get_by_role("link", name="Invoice 42").click()
    expect(page.locator("#timeline")).to_contain_text("email.queued")
    expect(page.locator("#timeline")).to_contain_text("email.sent")
    transcript = page.locator("pre.transcript").first
    expect(transcript).to_contain_text("EHLO")
    expect(transcript).to_contain_text("S: 250")
    expect(page.locator("pre.body")).to_contain_text("Hello reader")
    frame = page.frame_locator("iframe.message")
    expect(frame.locator("b")).to_have_text("reader")
    # Sandboxed: the message's script did not run, and its remote image was not loaded.
    assert frame.locator("body").get_attribute("data-ran") is None
    settled = "img => img.decode().then(() => 'loaded', () => 'not loaded')"
    assert frame.locator("img").evaluate(settled) == "not loaded"  # done trying, either way
    # Chromium lists the image's request, refused by the frame's policy before it is sent.
    assert refused.get(pixel) == "csp", refused
    page.locator("iframe.message").scroll_into_view_if_needed()
    # A full-page shot leaves the sandboxed frame blank (it paints in its own process).
    page.locator("iframe.message").screenshot(path=str(ARTIFACTS / "email-html.png"))
    page.screenshot(path=str(ARTIFACTS / "email-page.png"), full_page=True)
    assert (ARTIFACTS / "email-page.png").stat().st_size > 0


def test_live_updates_on_an_emails_page_and_the_list(page: Page, dashboard: Dashboard) -> None:
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    scheduled = send(dashboard, subject="Later", scheduled_at=later)
    sign_in(page, dashboard, dashboard.team_a.live)
    # The page's stream is held back until the email is canceled: the event is recorded after
    # the page was read and before its script connects, and arrives all the same.
    held: list[Route] = []
    page.route("**/ui/events/stream*", lambda route: held.append(route))
    page.goto(f"{dashboard.url}/ui/emails/{scheduled}")
    expect(page.locator("#email .status")).to_have_text("scheduled")
    until(lambda: held or page.evaluate("0"), "the page's stream request")
    canceled = dashboard.api("POST", f"/emails/{scheduled}/cancel", dashboard.team_a)
    assert canceled.status_code == 200, canceled.text
    held[0].continue_()
    page.unroute("**/ui/events/stream*")
    expect(page.locator("#timeline")).to_contain_text("email.canceled")
    expect(page.locator("#timeline li", has_text="email.canceled")).to_have_count(1)
    expect(page.locator("#email .status")).to_have_text("canceled")

    page.goto(dashboard.url + "/ui/emails")
    expect(page.locator("#emails")).to_contain_text("Later")
    again = send(dashboard, subject="Fresh one", scheduled_at=later)
    expect(page.locator("#live-notice")).to_contain_text("1 new email")
    dashboard.api("POST", f"/emails/{again}/cancel", dashboard.team_a)


def test_a_webhook_event_is_replayed(page: Page, dashboard: Dashboard) -> None:
    created = dashboard.api(
        "POST", "/webhooks", dashboard.team_a,
        json={"endpoint": dashboard.receiver.url, "events": ["email.sent"]},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    email_id = send(dashboard, subject="Hooked")

    def posts() -> list[Received]:  # other tests' mail may reach the endpoint too
        return [r for r in dashboard.receiver.requests if email_id.encode() in r.body]

    first = until(posts, "the webhook delivery")[0]

    sign_in(page, dashboard, dashboard.team_a.live)
    page.goto(dashboard.url + "/ui/webhooks")
    page.get_by_role("link", name=dashboard.receiver.url).click()
    event_id = first.headers["webhook-id"]
    page.locator(f"tr[data-event-id='{event_id}']").get_by_role("link").click()
    expect(page.locator("pre.payload")).to_contain_text(email_id)
    expect(page.locator("#attempts tbody tr")).to_have_count(1)
    page.get_by_role("button", name="Replay this event").click()
    expect(page.get_by_role("status")).to_contain_text("delivered again")
    replayed = until(lambda: posts()[1:], "the replayed delivery")[0]
    assert replayed.headers["webhook-id"] == event_id and replayed.body == first.body
    page.reload()
    expect(page.locator("#attempts tbody tr")).to_have_count(2)


def suppressed(dashboard: Dashboard) -> list[str]:
    listed = dashboard.api("GET", "/suppressions", dashboard.team_a).json()["data"]
    return [item["email"] for item in listed]


def test_a_suppression_is_added_and_removed(page: Page, dashboard: Dashboard) -> None:
    sign_in(page, dashboard, dashboard.team_a.live)
    page.goto(dashboard.url + "/ui/suppressions")
    page.get_by_label("Address to suppress").fill("Blocked@Example.com")
    page.get_by_role("button", name="Suppress", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("suppressed")
    expect(page.locator("#suppressions")).to_contain_text("blocked@example.com")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "suppressions.png"), full_page=True)
    assert "blocked@example.com" in suppressed(dashboard)

    page.get_by_role("button", name="Remove the suppression of blocked@example.com").click()
    expect(page.get_by_role("status")).to_contain_text("removed")
    expect(page.locator("#suppressions")).not_to_contain_text("blocked@example.com")
    assert "blocked@example.com" not in suppressed(dashboard)


def test_another_team_cannot_open_an_email(page: Page, dashboard: Dashboard) -> None:
    email_id = send(dashboard, subject="Team A only")
    sign_in(page, dashboard, dashboard.team_b.live)
    answer = page.goto(f"{dashboard.url}/ui/emails/{email_id}")
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    page.goto(dashboard.url + "/ui/emails")
    expect(page.locator("#emails")).not_to_contain_text("Team A only")


CONTROLS = {"button", "textbox", "combobox", "link", "checkbox", "searchbox", "Iframe"}


def unnamed_controls(page: Page) -> list[str]:
    """The page's controls without an accessible name, by Chromium's own accessibility tree."""
    session = page.context.new_cdp_session(page)
    try:
        tree = session.send("Accessibility.getFullAXTree")
    finally:
        session.detach()
    found = []
    for node in tree["nodes"]:
        role = node.get("role", {}).get("value")
        name = str(node.get("name", {}).get("value", "")).strip()
        if role in CONTROLS and not node.get("ignored") and not name:
            found.append(f"{role} {node.get('nodeId')}")
    return found


def test_every_control_has_an_accessible_name(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/ui/sign-in")
    assert unnamed_controls(page) == []
    sign_in(page, dashboard, dashboard.team_a.live)
    email_id = send(dashboard, subject="Named", html="<p>x</p>", text="x")
    dashboard.api("POST", "/suppressions", dashboard.team_a, json={"email": "named@example.com"})
    paths = [
        "/ui/emails", f"/ui/emails/{email_id}", "/ui/suppressions", "/ui/domains",
        "/ui/webhooks", "/ui/templates", "/ui/broadcasts", "/ui/received",
    ]  # fmt: skip
    for path in paths:
        page.goto(dashboard.url + path)
        assert unnamed_controls(page) == [], path


def test_the_pages_work_without_javascript(browser: Browser, dashboard: Dashboard) -> None:
    context = browser.new_context(java_script_enabled=False)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        email_id = send(dashboard, subject="No script needed")
        sign_in(page, dashboard, dashboard.team_a.live)
        page.get_by_label("Subject contains").fill("no script")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#emails tbody tr")).to_have_count(1)
        page.get_by_role("link", name="No script needed").click()
        expect(page.locator("#email")).to_contain_text(email_id)
        page.goto(dashboard.url + "/ui/suppressions")
        page.get_by_label("Address to suppress").fill("nojs@example.com")
        page.get_by_role("button", name="Suppress", exact=True).click()
        page.get_by_role("button", name="Remove the suppression of nojs@example.com").click()
        expect(page.get_by_role("status")).to_contain_text("removed")
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    finally:
        context.close()
