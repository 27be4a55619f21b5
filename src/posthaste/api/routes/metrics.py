"""``GET /metrics``: Prometheus text format, for the machine's operator only.

The counts span every team, so they are not the business of an API key: with
``POSTHASTE_METRICS_TOKEN`` set, a scraper sends ``Authorization: Bearer <token>`` (compared in
constant time, from any address); without it, only loopback peers are answered.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import APIRouter, Request
from starlette.responses import Response

from posthaste.api.deps import ServicesDep
from posthaste.api.errors import error_response
from posthaste.api.openapi import ERRORS, PUBLIC
from posthaste.errors import InvalidApiKey, MissingApiKey, PosthasteError
from posthaste.services.metrics import CONTENT_TYPE

router = APIRouter(tags=["operations"])

LOOPBACK_ONLY = (
    "Metrics are served to loopback peers only; set POSTHASTE_METRICS_TOKEN to scrape from"
    " another address."
)
EXPOSITION = {
    "description": "Prometheus text exposition format (version 0.0.4)",
    "content": {"text/plain": {"schema": {"type": "string"}}},
}


@router.get(
    "/metrics",
    summary="Prometheus metrics of every process of this machine",
    description=(
        "Text exposition format. Takes no API key: with `POSTHASTE_METRICS_TOKEN` set, send "
        "`Authorization: Bearer <token>`; without it, only loopback peers are answered."
    ),
    openapi_extra=PUBLIC,
    response_class=Response,
    responses={200: EXPOSITION, 401: ERRORS[401], 403: ERRORS[403], 503: ERRORS[503]},
)
async def metrics(request: Request, services: ServicesDep) -> Response:
    refusal = _refusal(request, services.settings.metrics_token)
    if refusal is not None:
        return error_response(refusal)
    body = await services.metrics_service.scrape()
    return Response(body, media_type=CONTENT_TYPE)


def _refusal(request: Request, token: str) -> PosthasteError | None:
    """Why this caller may not read the metrics, or None."""
    if not token:
        return None if _loopback(request) else InvalidApiKey(LOOPBACK_ONLY)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return MissingApiKey("Send 'Authorization: Bearer <POSTHASTE_METRICS_TOKEN>'.")
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return InvalidApiKey("The metrics token is not the one configured.")
    return None


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
