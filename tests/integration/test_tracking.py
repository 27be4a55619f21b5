"""Open and click tracking end to end, on SQLite and PostgreSQL: mail sent through the API,
the batch endpoint, the SMTP relay (smtplib) and a broadcast, delivered to a real SMTP sink,
the delivered message parsed, its pixel and links fetched through the real app, DKIM checked
by dkimpy, and the events read back through the API and a real webhook receiver."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email
import email.policy
import re
import smtplib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from email.message import EmailMessage
from typing import Any
from urllib.parse import unquote, urlsplit

import dkim
import httpx
from standardwebhooks import Webhook as StandardWebhook
from starlette.middleware.exceptions import ExceptionMiddleware

from posthaste.adapters.transports import build_transports
from posthaste.api.routes import tracking as tracking_routes
from posthaste.bootstrap import Services, build_services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.tracking import TrackingLinks
from posthaste.smtp.relay import Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from tests.apps import make_app
from tests.conftest import Tenant, _empty_tables, make_tenant
from tests.dkim_keys import StaticSigningKeys, dns_record, make_key, record_name
from tests.dns_server import running_zone
from tests.openapi_check import checked_client
from tests.senders import AnySender
from tests.smtp_sink import Received, Sink, running_sink
from tests.webhook_receiver import eventually, running_receiver

KEY = make_key("acme.test")
PIXEL_SRC = re.compile(r'<img src="([^"]+/t/o/[^"]+)"')
HREF = re.compile(r'href="([^"]*)"')
HTML = (
    "<html><head><title>Offer</title>"
    '<link href="https://fonts.example.com/css" rel="stylesheet">'
    '<a href="https://head.example.com/">in head</a></head>'
    '<body><p>Hello <a href="https://shop.example.com/sale?a=1&amp;b=2&region=eu">shop</a>'
    ' <a href="mailto:help@acme.test">help</a>'
    ' <a href="https://shop.example.com/caf\u00e9 menu">caf\u00e9</a></p>'
    "<!-- <a href='https://comment.example.com/'> --></body></html>"
)
TEXT = "Shop: https://shop.example.com/sale"


@dataclasses.dataclass
class World:
    services: Services
    client: httpx.AsyncClient
    tenant: Tenant
    sink: Sink

    async def call(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = await self.client.request(
            method, path, headers=self.tenant.headers("live"), **kwargs
        )
        assert response.status_code == status, response.text
        return response.json()

    async def domain(self, **flags: bool) -> dict[str, Any]:
        body = {"name": "acme.test", **flags}
        return dict(await self.call("POST", "/domains", 201, json=body))

    async def send(self, **fields: Any) -> str:
        body = {"from": "Acme <hello@acme.test>", "to": "ann@example.com", "subject": "Hi"}
        return str((await self.call("POST", "/emails", json={**body, **fields}))["id"])

    async def deliver(self) -> None:
        await self.services.make_worker().run_until_idle()

    async def events(self, email_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        await self.services.tracking.flush()
        found = (await self.call("GET", f"/emails/{email_id}/events"))["data"]
        return [e for e in found if kind is None or e["type"] == kind]

    def delivered(self, email_id: str) -> Received:
        [message] = [m for m in self.sink.messages if email_id in _message_id(m)]
        return message


def _message_id(message: Received) -> str:
    return str(email.message_from_bytes(message.data, policy=email.policy.default)["Message-ID"])


@asynccontextmanager
async def world(settings: Settings) -> AsyncIterator[World]:
    async with running_sink() as sink:
        target = DeliveryTarget(kind="smtp", host="127.0.0.1", port=sink.port, tls="none")
        configured = dataclasses.replace(
            settings,
            delivery=target,
            public_url="https://track.example.com",
            webhook_allow_private=True,
            webhook_retry_schedule=(0.05,),
        )
        services = build_services(
            configured,
            senders=AnySender(configured.default_region),
            signing_keys=StaticSigningKeys(KEY),
            transports=build_transports(configured),
        )
        await _empty_tables(services)
        await services.db.start_listening()
        try:
            tenant = await make_tenant(services)
            async with checked_client(make_app(services)) as http:
                yield World(services, http, tenant, sink)
        finally:
            await services.close()


def html_of(message: Received) -> str:
    parsed = email.message_from_bytes(message.data, policy=email.policy.default)
    part = parsed.get_body(("html",))
    assert part is not None
    return str(part.get_content())


def text_of(message: Received) -> str:
    parsed = email.message_from_bytes(message.data, policy=email.policy.default)
    part = parsed.get_body(("plain",))
    assert part is not None
    return str(part.get_content())


def published_txt(name: bytes, timeout: int = 5) -> bytes:
    assert name.decode().rstrip(".") == record_name(KEY)
    return dns_record(KEY).encode()


def path_of(url: str) -> str:
    assert url.startswith("https://track.example.com/t/"), url
    return urlsplit(url).path


async def test_a_tracked_email_records_its_open_and_clicks(settings: Settings) -> None:
    async with world(settings) as w, running_receiver() as receiver:
        await w.domain(open_tracking=True, click_tracking=True)
        hook = await w.call(
            "POST",
            "/webhooks",
            201,
            json={"endpoint": receiver.url, "events": ["email.opened", "email.clicked"]},
        )
        dispatcher = w.services.make_webhook_dispatcher()
        dispatching = asyncio.create_task(dispatcher.run())
        email_id = await w.send(html=HTML, text=TEXT, tags=[{"name": "plan", "value": "pro"}])
        await w.deliver()
        message = w.delivered(email_id)
        assert dkim.verify(message.data, dnsfunc=published_txt)  # signed after tracking
        html = html_of(message)
        assert text_of(message).strip() == TEXT  # text parts are not rewritten
        hrefs = HREF.findall(html)
        # Untouched: the stylesheet and the link in <head>, mailto, the commented link.
        assert hrefs[:2] == ["https://fonts.example.com/css", "https://head.example.com/"]
        assert hrefs[3] == "mailto:help@acme.test"
        assert "<a href='https://comment.example.com/'>" in html
        shop, cafe = path_of(hrefs[2]), path_of(hrefs[4])
        [pixel] = PIXEL_SRC.findall(html)

        opened = await w.client.get(path_of(pixel), headers={"User-Agent": "Mail/1.0"})
        assert opened.status_code == 200 and opened.content.startswith(b"GIF89a")
        assert opened.headers["content-type"] == "image/gif"
        assert "no-store" in opened.headers["cache-control"]
        clicked = await w.client.get(shop, headers={"User-Agent": "Browser/2.0"})
        assert clicked.status_code == 302 and "no-store" in clicked.headers["cache-control"]
        assert clicked.headers["location"] == "https://shop.example.com/sale?a=1&b=2&region=eu"
        clicked = await w.client.get(cafe)
        assert clicked.headers["location"] == "https://shop.example.com/caf%C3%A9%20menu"

        [open_event] = await w.events(email_id, "email.opened")
        assert open_event["data"]["open"] == {"ip_address": "127.0.0.1", "user_agent": "Mail/1.0"}
        clicks = [e["data"] for e in await w.events(email_id, "email.clicked")]
        assert [c["click"]["link"] for c in clicks] == [
            "https://shop.example.com/sale?a=1&b=2&region=eu",
            "https://shop.example.com/caf\u00e9 menu",
        ]
        assert clicks[0]["click"]["ip_address"] == "127.0.0.1"
        assert clicks[0]["click"]["user_agent"] == "Browser/2.0"
        assert clicks[0]["email_id"] == email_id and clicks[0]["tags"] == {"plan": "pro"}
        # The status does not move; the API shows the html as sent by the caller, /raw the
        # bytes that went out.
        record = await w.call("GET", f"/emails/{email_id}")
        assert record["status"] == "sent" and record["last_event"] == "email.sent"
        assert record["html"] == HTML
        raw = await w.client.get(f"/emails/{email_id}/raw", headers=w.tenant.headers("live"))
        assert raw.content.replace(b"\r\n", b"\n") == message.data.replace(b"\r\n", b"\n")

        await eventually(lambda: len(receiver.requests) == 3, what="three webhook deliveries")
        payloads = [
            StandardWebhook(hook["secret"]).verify(r.body, r.headers) for r in receiver.requests
        ]
        assert sorted(p["type"] for p in payloads) == ["email.clicked"] * 2 + ["email.opened"]
        dispatcher.stop()
        await asyncio.wait_for(dispatching, 10)


async def test_forged_tampered_and_foreign_tokens_are_404_and_record_nothing(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        await w.domain(open_tracking=True, click_tracking=True)
        first = await w.send(html='<p><a href="https://a.example.com/">a</a></p>')
        second = await w.send(html='<p><a href="https://b.example.com/">b</a></p>')
        await w.deliver()
        link = path_of(HREF.findall(html_of(w.delivered(first)))[0])
        pixel = path_of(PIXEL_SRC.findall(html_of(w.delivered(first)))[0])
        token = link.rsplit("/", 1)[1]
        payload, mac = token.split(".")
        # The same team's other email, and the evil URL, signed under another key.
        other_key = TrackingLinks("not-our-secret-" + "x" * 32, "https://track.example.com")
        team = w.tenant.team.id
        refused = [
            link[:-1] + ("A" if link[-1] != "A" else "B"),  # tampered MAC
            f"/t/c/{payload[:-2]}xx.{mac}",  # tampered payload
            path_of(other_key.click_url(team, first, "https://evil.example/")),
            path_of(other_key.click_url(team, second, "https://b.example.com/")),
            path_of(other_key.open_url(team, second)),
            "/t/c/" + pixel.rsplit("/", 1)[1],  # an open token as a click
            "/t/o/" + token,  # a click token as an open
            "/t/c/not-a-token",
            "/t/o/x.y",
        ]
        for path in refused:
            answer = await w.client.get(path)
            assert answer.status_code == 404, path
            assert answer.json()["name"] == "not_found" and "location" not in answer.headers
        assert await w.events(first, "email.clicked") == []
        assert await w.events(first, "email.opened") == []
        assert await w.events(second, "email.clicked") == []
        # The genuine ones still work, and name their own email only.
        assert (await w.client.get(link)).headers["location"] == "https://a.example.com/"
        assert len(await w.events(first, "email.clicked")) == 1
        assert await w.events(second, "email.clicked") == []


async def test_hammering_a_link_records_one_event_per_visitor(settings: Settings) -> None:
    async with world(settings) as w:
        await w.domain(open_tracking=True, click_tracking=True)
        email_id = await w.send(html='<p><a href="https://a.example.com/">a</a></p>')
        await w.deliver()
        html = html_of(w.delivered(email_id))
        link, pixel = path_of(HREF.findall(html)[0]), path_of(PIXEL_SRC.findall(html)[0])
        for _ in range(50):
            assert (await w.client.get(pixel)).status_code == 200
            assert (await w.client.get(link)).status_code == 302
        assert len(await w.events(email_id, "email.opened")) == 1
        assert len(await w.events(email_id, "email.clicked")) == 1


async def test_tracking_follows_the_domain_settings(settings: Settings) -> None:
    async with world(settings) as w:
        domain = await w.domain()
        html = '<p><a href="https://a.example.com/">a</a></p>'
        untracked = await w.send(html=html)
        await w.deliver()
        assert "/t/" not in html_of(w.delivered(untracked))
        await w.call("PATCH", f"/domains/{domain['id']}", json={"click_tracking": True})
        clicks_only = await w.send(html=html)
        await w.deliver()
        delivered = html_of(w.delivered(clicks_only))
        assert "/t/c/" in delivered and "/t/o/" not in delivered


async def test_batch_and_relay_mail_are_tracked_too(settings: Settings) -> None:
    async with world(settings) as w:
        await w.domain(open_tracking=True, click_tracking=True)
        base = {"from": "hello@acme.test", "to": "ann@example.com", "subject": "Batch"}
        batch = [
            {**base, "html": f'<p><a href="https://batch.example.com/{n}">{n}</a></p>'}
            for n in range(2)
        ]
        ids = [e["id"] for e in (await w.call("POST", "/emails/batch", json=batch))["data"]]
        relayed = await _relay(w.services, w.tenant.live)
        await w.deliver()
        for n, email_id in enumerate(ids):
            html = html_of(w.delivered(email_id))
            location = (await w.client.get(path_of(HREF.findall(html)[0]))).headers["location"]
            assert location == f"https://batch.example.com/{n}"
        message = w.delivered(relayed)
        assert dkim.verify(message.data, dnsfunc=published_txt)
        html = html_of(message)
        [pixel] = PIXEL_SRC.findall(html)
        assert (await w.client.get(path_of(pixel))).status_code == 200
        link = path_of(HREF.findall(html)[0])
        assert (await w.client.get(link)).headers["location"] == "https://relay.example.com/x"
        assert text_of(message).strip() == "See https://relay.example.com/x"
        assert len(await w.events(relayed, "email.opened")) == 1
        assert len(await w.events(relayed, "email.clicked")) == 1
        assert len(await w.events(ids[0], "email.clicked")) == 1


async def _relay(services: Services, key: str) -> str:
    """Submit a text+html message over the real relay with smtplib; the email's id (the
    relay's reply to DATA)."""
    server = RelayServer(services, "127.0.0.1", [Listener(0, False)])
    await server.start()
    cafile = services.settings.data_dir / CERT_FILENAME
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "hello@acme.test", "ann@example.com", "Relay"
    msg.set_content("See https://relay.example.com/x\n")
    msg.add_alternative('<p><a href="https://relay.example.com/x">x</a></p>', subtype="html")

    def submit() -> str:
        context = ssl.create_default_context(cafile=str(cafile))
        with smtplib.SMTP("127.0.0.1", server.ports[0], timeout=30) as client:
            client.starttls(context=context)
            client.login("posthaste", key)
            client.mail("hello@acme.test")
            client.rcpt("ann@example.com")
            code, reply = client.data(msg.as_bytes(policy=email.policy.SMTP))
        assert code == 250, reply
        return reply.decode().removeprefix("OK ")

    try:
        return await asyncio.to_thread(submit)
    finally:
        await server.close()


async def test_a_broadcast_keeps_its_unsubscribe_links_and_tracks_the_rest(
    settings: Settings,
) -> None:
    async with world(settings) as w:
        await w.domain(open_tracking=True, click_tracking=True)
        segment = await w.call("POST", "/segments", 201, json={"name": "All"})
        contact = {"email": "ann@example.com", "segments": [segment["id"]]}
        await w.call("POST", "/contacts", 201, json=contact)
        body = {
            "segment_id": segment["id"],
            "from": "News <news@acme.test>",
            "subject": "News",
            "html": "<p><a href='https://news.example.com/a'>read</a>"
            " <a href='{{unsubscribe_url}}'>stop</a></p>",
            "send": True,
        }
        created = await w.call("POST", "/broadcasts", 201, json=body)
        for _ in range(100):
            await w.deliver()
            if w.sink.messages:
                break
            await asyncio.sleep(0.05)
        [message] = w.sink.messages
        assert dkim.verify(message.data, dnsfunc=published_txt)
        parsed = email.message_from_bytes(message.data, policy=email.policy.default)
        unsubscribe = str(parsed["List-Unsubscribe"]).split(",")[0].strip(" <>")
        hrefs = HREF.findall(html_of(message).replace("'", '"'))
        assert hrefs[1] == unsubscribe and "/unsubscribe/" in unsubscribe
        clicked = await w.client.get(path_of(hrefs[0]))
        assert clicked.headers["location"] == "https://news.example.com/a"
        assert created["id"]


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    route: str | None  # the route the request log and the metrics name


async def asgi_answer(app: Any, services: Services, method: str, target: str) -> Answer:
    """``app``'s answer to one request from 127.0.0.1 (an ASGI call, as uvicorn makes it)."""
    path, _, query = target.partition("?")
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": unquote(path),
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"track.example.com"), (b"user-agent", b"Mail/1.0")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 443),
        "app": make_app(services),  # what ``request.app`` reads the services from
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    route = getattr(scope.get("route"), "path", None)
    return Answer(start["status"], list(start["headers"]), body, route)


async def test_the_tracking_paths_answer_as_the_routes_do(settings: Settings) -> None:
    """``TrackingPaths`` answers a GET of a tracking link ahead of FastAPI's routing: the same
    status, headers and body as the routes, the same route named, the hit recorded once; any
    other request on those paths goes on to the routes."""
    async with world(settings) as w:
        await w.domain(open_tracking=True, click_tracking=True)
        email_id = await w.send(html=HTML)
        await w.deliver()
        html = html_of(w.delivered(email_id))
        link, pixel = path_of(HREF.findall(html)[2]), path_of(PIXEL_SRC.findall(html)[0])
        passed: list[str] = []
        routed = make_app(w.services).build_middleware_stack()
        while not isinstance(routed, ExceptionMiddleware):  # down to FastAPI's own layers
            routed = routed.app

        async def onward(scope: Any, receive: Any, send: Any) -> None:
            passed.append(f"{scope['method']} {scope['path']}")
            await routed(scope, receive, send)

        routes = {route.path: route for route in tracking_routes.router.routes}
        lean = tracking_routes.TrackingPaths(onward, w.services.tracking, routes)
        taken = [pixel, link, "/t/o/x.y", "/t/c/not-a-token", link[:-1] + "A", pixel + "?a=1"]
        for target in taken:
            fast = await asgi_answer(lean, w.services, "GET", target)
            assert fast == await asgi_answer(routed, w.services, "GET", target), target
            assert fast.status in (200, 302, 404) and fast.route is not None
        assert passed == []
        assert len(await w.events(email_id, "email.opened")) == 1
        [click] = await w.events(email_id, "email.clicked")
        assert click["data"]["click"]["link"] == "https://shop.example.com/sale?a=1&b=2&region=eu"
        assert click["data"]["click"]["user_agent"] == "Mail/1.0"

        left = [
            ("HEAD", pixel, 405),
            ("POST", link, 405),
            ("GET", pixel + "?a=%00", 422),
            ("GET", "/t/o/%00", 404),
            ("GET", "/t/o/", 404),
            ("GET", pixel + "/", 307),
            ("GET", "/t/o/a/b", 404),
        ]
        for method, target, status in left:
            passed.clear()
            answer = await asgi_answer(lean, w.services, method, target)
            assert answer == await asgi_answer(routed, w.services, method, target), target
            path = unquote(target.partition("?")[0])
            assert answer.status == status and passed == [f"{method} {path}"], target


async def test_the_tracking_links_are_public_in_the_openapi_document(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    assert document["security"] == [{"bearer": []}]  # every other route needs a key
    pixel, link = document["paths"]["/t/o/{token}"]["get"], document["paths"]["/t/c/{token}"]["get"]
    assert pixel["security"] == [] and link["security"] == []
    assert "image/gif" in pixel["responses"]["200"]["content"]
    assert {"302", "404"} <= set(link["responses"])


@asynccontextmanager
async def http_server(services: Services) -> AsyncIterator[str]:
    """The API as ``serve`` runs it (uvicorn, ``server._api_server``), on its own port."""
    from posthaste.server import _api_server

    server = _api_server(services)
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(600):  # up to a minute
            if server.started or serving.done():
                break
            await asyncio.sleep(0.1)
        assert server.started, "the API did not start"
        port = server.servers[0].sockets[0].getsockname()[1]  # the one the system chose
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving


async def opened_from(settings: Settings, forwarded: str) -> tuple[str, int]:
    """The address an open recorded when the pixel was fetched over a real HTTP connection
    from 127.0.0.1 with ``X-Forwarded-For: forwarded``, and what ``GET /metrics`` (loopback
    peers only, without a token) answered the same way."""
    async with world(dataclasses.replace(settings, http_host="127.0.0.1", http_port=0)) as w:
        await w.domain(open_tracking=True)
        email_id = await w.send(html="<p>Hi</p>")
        await w.deliver()
        [pixel] = PIXEL_SRC.findall(html_of(w.delivered(email_id)))
        headers = {"X-Forwarded-For": forwarded}
        async with http_server(w.services) as url, httpx.AsyncClient(base_url=url) as http:
            assert (await http.get(path_of(pixel), headers=headers)).status_code == 200
            metrics = (await http.get("/metrics", headers=headers)).status_code
        [opened] = await w.events(email_id, "email.opened")
        return str(opened["data"]["open"]["ip_address"]), metrics


async def test_x_forwarded_for_is_believed_only_from_trusted_proxies(settings: Settings) -> None:
    # By default the connection's own address counts, whatever the client claims.
    assert await opened_from(settings, "203.0.113.7") == ("127.0.0.1", 200)
    # Behind a trusted proxy: the address the proxy saw (the rightmost untrusted entry, so a
    # client cannot put its own claim in front), and /metrics no longer counts it as loopback.
    trusted = dataclasses.replace(settings, trusted_proxies=("127.0.0.1",))
    assert await opened_from(trusted, "198.51.100.9, 203.0.113.7") == ("203.0.113.7", 403)


async def test_a_domain_tracks_on_its_own_subdomain_once_its_cname_is_verified(
    settings: Settings,
) -> None:
    html = '<p><a href="https://a.example.com/">a</a></p>'
    with contextlib.contextmanager(running_zone)() as zone:
        configured = dataclasses.replace(settings, dns_nameservers=zone.nameservers)
        async with world(configured) as w:

            async def sent_links() -> tuple[str, str]:
                email_id = await w.send(html=html)
                await w.deliver()
                delivered = html_of(w.delivered(email_id))
                return HREF.findall(delivered)[0], PIXEL_SRC.findall(delivered)[0]

            body = {
                "name": "acme.test",
                "open_tracking": True,
                "click_tracking": True,
                "tracking_subdomain": "Links",
            }
            domain = await w.call("POST", "/domains", 201, json=body)
            assert domain["tracking_subdomain"] == "links"
            [cname] = [r for r in domain["records"] if r["record"] == "Tracking"]
            assert (cname["type"], cname["name"], cname["value"], cname["status"]) == (
                "CNAME",
                "links.acme.test",
                "track.example.com",  # the host of POSTHASTE_PUBLIC_URL
                "not_started",
            )
            # Until the CNAME is verified, links stay on the public URL.
            link, pixel = await sent_links()
            assert link.startswith("https://track.example.com/t/c/")
            assert pixel.startswith("https://track.example.com/t/o/")

            zone.add("links.acme.test", "CNAME", "track.example.com")
            checked = await w.call("POST", f"/domains/{domain['id']}/verify")
            [cname] = [r for r in checked["records"] if r["record"] == "Tracking"]
            assert cname["status"] == "verified"
            link, pixel = await sent_links()
            assert link.startswith("https://links.acme.test/t/c/")
            assert pixel.startswith("https://links.acme.test/t/o/")
            clicked = await w.client.get(urlsplit(link).path)  # any host serves the tokens
            assert clicked.status_code == 302
            assert clicked.headers["location"] == "https://a.example.com/"

            # Another subdomain starts unverified; null removes it: the public URL again.
            moved = await w.call(
                "PATCH", f"/domains/{domain['id']}", json={"tracking_subdomain": "go"}
            )
            [cname] = [r for r in moved["records"] if r["record"] == "Tracking"]
            assert (cname["name"], cname["status"]) == ("go.acme.test", "not_started")
            assert (await sent_links())[0].startswith("https://track.example.com/t/c/")
            removed = await w.call(
                "PATCH", f"/domains/{domain['id']}", json={"tracking_subdomain": None}
            )
            assert removed["tracking_subdomain"] is None
            assert all(r["record"] != "Tracking" for r in removed["records"])
