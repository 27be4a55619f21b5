"""/destinations: the receiving destinations of ``mx`` delivery and their throttle.

Machine-wide, so full-access keys only, and nothing of any team in it: no addresses, no email
ids, only each destination's pace and the replies behind its last decisions.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, ServicesDep
from posthaste.api.openapi import ERRORS
from posthaste.api.responses import listing
from posthaste.api.schemas.destinations import DestinationList
from posthaste.core.serialize import destination_record

router = APIRouter(tags=["destinations"])


@router.get(
    "/destinations",
    summary="The receiving destinations: state, current rate, suspension and recent replies",
    responses={200: {"model": DestinationList}, **ERRORS},
)
async def list_destinations(principal: FullPrincipal, services: ServicesDep) -> Response:
    views = await services.destinations.list()
    return listing([destination_record(v) for v in views])
