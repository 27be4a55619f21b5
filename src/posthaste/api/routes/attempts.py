"""/emails/{id}/attempts: the delivery attempts of an email with their SMTP transcripts."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, ServicesDep
from posthaste.api.openapi import ERRORS
from posthaste.api.responses import listing
from posthaste.api.schemas.attempts import AttemptList
from posthaste.core.serialize import attempt_record

router = APIRouter(tags=["emails"])


@router.get(
    "/emails/{email_id}/attempts",
    summary="The email's delivery attempts with their SMTP transcripts, oldest first",
    responses={200: {"model": AttemptList}, **ERRORS},
)
async def email_attempts(
    email_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    items = await services.attempts.for_email(principal, email_id)
    return listing([attempt_record(a) for a in items])
