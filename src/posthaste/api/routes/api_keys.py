"""/api-keys: create, list and revoke a team's API keys (a token is shown once, at creation)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, listing
from posthaste.api.schemas.api_keys import ApiKeyList, CreateApiKeyRequest, CreatedApiKey
from posthaste.api.schemas.common import Deleted
from posthaste.core.api_keys import parse_new_api_key
from posthaste.core.serialize import api_key_record

router = APIRouter()


@router.post(
    "/api-keys",
    status_code=201,
    tags=["api-keys"],
    summary="Create an API key",
    responses={201: {"model": CreatedApiKey}, **ERRORS},
    openapi_extra=body_schema(CreateApiKeyRequest),
)
async def create_api_key(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    new = parse_new_api_key(json_object(body), principal.key.mode)
    created = await services.api_keys.create(principal.team_id, new)
    return json_response({**api_key_record(created.key), "token": created.token}, 201)


@router.get(
    "/api-keys",
    tags=["api-keys"],
    summary="List API keys (never their tokens)",
    responses={200: {"model": ApiKeyList}, **ERRORS},
)
async def list_api_keys(principal: FullPrincipal, services: ServicesDep) -> Response:
    return listing([api_key_record(k) for k in await services.api_keys.all(principal.team_id)])


@router.delete(
    "/api-keys/{key_id}",
    tags=["api-keys"],
    summary="Revoke an API key",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def revoke_api_key(key_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    await services.api_keys.revoke(key_id, principal.team_id)
    return deleted("api_key", key_id)
