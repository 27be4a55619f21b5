"""Public probes: /healthz (alive) and /readyz (database reachable)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import ServicesDep
from posthaste.api.errors import error_response
from posthaste.api.openapi import PUBLIC
from posthaste.api.responses import json_response
from posthaste.errors import ServiceUnavailable

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="The process is alive", openapi_extra=PUBLIC)
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get("/readyz", summary="The database is reachable", openapi_extra=PUBLIC)
async def readyz(services: ServicesDep) -> Response:
    if await services.db.ping():
        return json_response({"status": "ok"})
    return error_response(ServiceUnavailable("The database is unreachable."))
