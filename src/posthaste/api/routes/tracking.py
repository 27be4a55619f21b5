"""Tracking links, served without an API key (the signed token is the credential): the open
pixel and the click redirect. Neither answer may be cached, or a second open or click would
never reach us; the redirect goes only to the URL signed into the token."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from posthaste.api.openapi import ERRORS, PUBLIC
from posthaste.bootstrap import Services
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
    _tracking(request).opened(token, _visitor(request))
    return Response(PIXEL, media_type="image/gif", headers=NOT_STORED)


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
    url = _tracking(request).clicked(token, _visitor(request))
    return RedirectResponse(url, status_code=302, headers=NOT_STORED)


def _tracking(request: Request) -> TrackingService:
    # Not a ``Depends``: solving a dependency was half of these routes' CPU per request.
    services: Services = request.app.state.services
    return services.tracking


def _visitor(request: Request) -> Visitor:
    client = request.client
    return Visitor(client.host if client else None, request.headers.get("user-agent"))
