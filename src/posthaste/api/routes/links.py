"""Public links, served without an API key: the signed token in the path is the credential."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import ServicesDep
from posthaste.api.openapi import ERRORS, PUBLIC
from posthaste.api.routes.emails import attachment_download

router = APIRouter(tags=["links"])


@router.get(
    "/attachments/{token}",
    summary="Download an attachment by the signed link in its download_url (no key; expires)",
    responses={200: {"content": {"application/octet-stream": {}}}, 404: ERRORS[404]},
    openapi_extra=PUBLIC,
)
async def linked_attachment(token: str, services: ServicesDep) -> Response:
    info, data = await services.emails.download(token)
    return attachment_download(info, data)


@router.get(
    "/received-attachments/{token}",
    summary="Download a received attachment by the signed link in its download_url (no key; "
    "expires)",
    responses={200: {"content": {"application/octet-stream": {}}}, 404: ERRORS[404]},
    openapi_extra=PUBLIC,
)
async def linked_received_attachment(token: str, services: ServicesDep) -> Response:
    info, data = await services.received.download(token)
    return attachment_download(info, data)


@router.get(
    "/received-raw/{token}",
    summary="Download a received message by the signed link in its raw.download_url (no key; "
    "expires)",
    responses={200: {"content": {"message/rfc822": {}}}, 404: ERRORS[404]},
    openapi_extra=PUBLIC,
)
async def linked_received_raw(token: str, services: ServicesDep) -> Response:
    return Response(await services.received.raw_download(token), media_type="message/rfc822")
