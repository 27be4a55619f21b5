"""The FastAPI application factory."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from posthaste import __version__
from posthaste.api.deps import refuse_nul_in_url
from posthaste.api.docs import install_docs
from posthaste.api.errors import install_error_handlers
from posthaste.api.middleware import BodyLimit, CatchAll, MemoryBudget, RequestLog
from posthaste.api.openapi import install_openapi
from posthaste.api.routes import (
    api_keys,
    attempts,
    audiences,
    automations,
    broadcasts,
    contact_imports,
    contacts,
    custom_events,
    destinations,
    domains,
    emails,
    event_definitions,
    event_stream,
    health,
    inbound,
    links,
    metrics,
    pools,
    segments,
    streams,
    suppressions,
    templates,
    topics,
    tracking,
    unsubscribe,
    webhooks,
)
from posthaste.bootstrap import Services
from posthaste.ui.app import install_ui

DESCRIPTION = (
    "Posthaste: self-hosted email delivery. Authenticate with `Authorization: Bearer <API_KEY>`. "
    'Errors are `{"statusCode", "name", "message"}`. No text in a body or a query may contain '
    "NUL (U+0000): 422 validation_error (in a path: 404 not_found)."
)


def create_app(services: Services) -> FastAPI:
    app = FastAPI(
        title="Posthaste",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,  # served by install_docs, without a CDN
        redoc_url=None,
        dependencies=[Depends(refuse_nul_in_url)],
    )
    app.state.services = services
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(metrics.router)
    # Early: routes are tried in order, and a recipient's mail client hits these the most.
    app.include_router(tracking.router)
    app.include_router(inbound.router)  # before emails: /emails/received is not an email id
    app.include_router(emails.router)
    app.include_router(attempts.router)
    app.include_router(destinations.router)
    app.include_router(pools.router)
    app.include_router(links.router)
    app.include_router(api_keys.router)
    app.include_router(streams.router)
    app.include_router(suppressions.router)
    app.include_router(templates.router)
    app.include_router(domains.router)
    app.include_router(webhooks.router)
    app.include_router(contact_imports.router)  # before /contacts/{id_or_email}
    app.include_router(contacts.router)
    app.include_router(segments.router)
    app.include_router(topics.router)
    app.include_router(broadcasts.router)
    app.include_router(audiences.router)
    app.include_router(unsubscribe.router)
    app.include_router(automations.router)
    app.include_router(custom_events.router)
    app.include_router(event_stream.router)
    app.include_router(event_definitions.router)  # after /events/send and /events/stream
    install_ui(app, services)
    install_openapi(app)
    install_docs(app)
    # Outermost last: the log sees every answer, the body limit runs before anything reads;
    # the tracking links and the sends are answered inside all three, ahead of FastAPI's routing.
    routes = {route.path: route for route in tracking.router.routes if isinstance(route, APIRoute)}
    app.add_middleware(tracking.TrackingPaths, tracking=services.tracking, routes=routes)
    sends = [route for route in emails.router.routes if isinstance(route, APIRoute)]
    app.add_middleware(emails.SendPaths, services=services, routes=sends)
    app.add_middleware(CatchAll)
    app.add_middleware(BodyLimit, budget=MemoryBudget(services.settings.request_memory))
    app.add_middleware(RequestLog, metrics=services.metrics)
    return app


async def warm_up(app: FastAPI) -> None:
    """Walk the route table once before listening: FastAPI sets up included routers on first
    use (1.5-2.5 s on a busy machine), which a client's first request would otherwise wait out.
    Through the router alone, with a path no route takes: no endpoint, log line or metric."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/.well-known/posthaste-warm-up",
        "raw_path": b"/.well-known/posthaste-warm-up",
        "query_string": b"",
        "headers": [],
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 0),
        "http_version": "1.1",
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    await app.router(scope, receive, send)
