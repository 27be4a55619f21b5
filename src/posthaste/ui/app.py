"""Mounting the dashboard on the API's application."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from posthaste.bootstrap import Services
from posthaste.errors import NotFound
from posthaste.ui.live import StreamTokens
from posthaste.ui.routes import (
    broadcasts,
    destinations,
    domains,
    emails,
    live,
    received,
    session,
    static,
    suppressions,
    templates,
    webhooks,
)
from posthaste.ui.routing import UiRoute
from posthaste.ui.session import SessionSealer

unknown = APIRouter(prefix="/ui", route_class=UiRoute)


@unknown.api_route("/{rest:path}", methods=["GET", "POST"])
async def unknown_page(request: Request, rest: str) -> Response:
    raise NotFound(f"No dashboard page at {request.url.path}.")


def install_ui(app: FastAPI, services: Services) -> None:
    """The dashboard's routes under ``/ui`` (none of them in ``/openapi.json``)."""
    app.state.ui_sessions = SessionSealer(services.settings.secret_keys)
    app.state.ui_stream_tokens = StreamTokens(services.settings.secret_keys)
    pages = (emails, domains, webhooks, suppressions, templates, broadcasts, received, destinations)
    for module in (session, static, live, *pages):
        app.include_router(module.router)
    app.include_router(unknown)  # last: any other /ui path is a page saying so
