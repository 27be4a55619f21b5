"""/pools: the IP pools of ``mx`` delivery and the warm-up of each source address.

Machine-wide, so full-access keys only, and nothing of any team in it: each address's warm-up
day, today's cap and the messages it took today (UTC), counted across every team.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, ServicesDep
from posthaste.api.openapi import ERRORS
from posthaste.api.responses import listing
from posthaste.api.schemas.pools import PoolList
from posthaste.core.serialize import pool_record

router = APIRouter(tags=["pools"])


@router.get(
    "/pools",
    summary="The IP pools: source addresses, HELO name, each address's warm-up and count today",
    responses={200: {"model": PoolList}, **ERRORS},
)
async def list_pools(principal: FullPrincipal, services: ServicesDep) -> Response:
    return listing([pool_record(v) for v in await services.pools.list()])
