"""Tracking links, served without an API key (the signed token is the credential): the open
pixel and the click redirect. Neither answer may be cached, or a second open or click would
never reach us; the redirect goes only to the URL signed into the token.

A recipient's mail client fetches these more than anything else is fetched, so ``TrackingPaths``
answers a plain ``GET`` of either ahead of FastAPI's routing (a pure ASGI middleware inside the
request log, the body limit and the 500 handler): the token checked, the pixel or the redirect
sent, the hit recorded as the routes record it. FastAPI's request, its dependencies and its route
matching cost about twice what the rest of the request does (``bench/README.md``). Anything else
on these paths (another method, a NUL, a ``%00`` in the query) goes on to the routes below, which
also describe both in the OpenAPI document; either way the answer is the same.
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from posthaste.api.errors import error_response
from posthaste.api.openapi import ERRORS, PUBLIC
from posthaste.bootstrap import Services
from posthaste.errors import NotFound
from posthaste.services.tracking import TrackingService, Visitor

router = APIRouter(tags=["tracking"])

# A transparent 1x1 GIF (43 bytes).
PIXEL = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00"
    b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)
NOT_STORED = {
    "Cache-Control": "no-store, no-cache, must-revalidate, private, max-age=0",
    "Pragma": "no-cache",
    "Expires": "Thu, 01 Jan 1970 00:00:00 GMT",
    "Referrer-Policy": "no-referrer",
}


@router.get(
    "/t/o/{token}",
    summary="The open-tracking pixel of an email (no key; records email.opened)",
    responses={200: {"content": {"image/gif": {}}}, 404: ERRORS[404]},
    response_class=Response,
    openapi_extra=PUBLIC,
)
async def tracked_open(token: str, request: Request) -> Response:
    return opened(_tracking(request), token, _visitor(request))


@router.get(
    "/t/c/{token}",
    summary="A tracked link of an email: redirects to its original URL (no key; records "
    "email.clicked)",
    status_code=302,
    responses={
        302: {
            "description": "To the link's original URL, the one signed into the token",
            "headers": {"Location": {"schema": {"type": "string"}}},
        },
        404: ERRORS[404],
    },
    response_class=RedirectResponse,
    openapi_extra=PUBLIC,
)
async def tracked_click(token: str, request: Request) -> Response:
    return clicked(_tracking(request), token, _visitor(request))


def opened(tracking: TrackingService, token: str, visitor: Visitor) -> Response:
    """The pixel, once the open is taken; ``NotFound`` for a token that is not genuine."""
    tracking.opened(token, visitor)
    return Response(PIXEL, media_type="image/gif", headers=NOT_STORED)


def clicked(tracking: TrackingService, token: str, visitor: Visitor) -> Response:
    """The redirect to the link's own URL, once the click is taken; ``NotFound`` likewise."""
    url = tracking.clicked(token, visitor)
    return RedirectResponse(url, status_code=302, headers=NOT_STORED)


def _tracking(request: Request) -> TrackingService:
    # Not a ``Depends``: solving a dependency was half of these routes' CPU per request.
    services: Services = request.app.state.services
    return services.tracking


def _visitor(request: Request) -> Visitor:
    client = request.client
    return Visitor(client.host if client else None, request.headers.get("user-agent"))


_ANSWERS = {"/t/o/": opened, "/t/c/": clicked}


class TrackingPaths:
    """``GET /t/o/{token}`` and ``GET /t/c/{token}`` answered without FastAPI's routing, with
    the routes' own answers (``routes``: the routes by path, named in the request's scope as
    the router names them, for the request log and the metrics)."""

    def __init__(
        self, app: ASGIApp, tracking: TrackingService, routes: Mapping[str, BaseRoute]
    ) -> None:
        self.app = app
        self.tracking = tracking
        self.routes = {prefix: routes[prefix + "{token}"] for prefix in _ANSWERS}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _tracking_token(scope)
        if token is None:
            await self.app(scope, receive, send)
            return
        prefix = scope["path"][:5]
        scope["route"] = self.routes[prefix]
        try:
            response = _ANSWERS[prefix](self.tracking, token, _scope_visitor(scope))
        except NotFound as exc:
            response = error_response(exc)
        await response(scope, receive, send)


def _tracking_token(scope: Scope) -> str | None:
    """The token of a request the routes would take and answer alike: a plain ``GET`` of
    ``/t/o/<token>`` or ``/t/c/<token>`` (one path segment); None for anything else."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if path[:5] not in _ANSWERS or b"%00" in scope["query_string"]:
        return None
    token = path[5:]
    if not token or "/" in token or "\x00" in token:
        return None
    return token


def _scope_visitor(scope: Scope) -> Visitor:
    client = scope.get("client")
    agent = None
    for name, value in scope["headers"]:
        if name == b"user-agent":
            agent = value.decode("latin-1")
            break
    return Visitor(client[0] if client else None, agent)
