"""/api-keys: create, list and revoke a team's API keys (a token is shown once, at creation)."""

from __future__ import annotations

from typing import TypeVar

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, listing
from posthaste.api.schemas.api_keys import ApiKeyList, CreateApiKeyRequest, CreatedApiKey
from posthaste.api.schemas.common import Deleted
from posthaste.bootstrap import Services
from posthaste.core.models import KeyMode, Permission, Principal
from posthaste.core.serialize import api_key_record
from posthaste.errors import NotFound, ValidationError

router = APIRouter()
E = TypeVar("E", KeyMode, Permission)


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
    fields = json_object(body)
    name = fields.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise ValidationError("'name' is required: 1-200 characters.")
    permission = _choice(fields.get("permission", "full_access"), Permission, "permission")
    mode = _choice(fields.get("mode") or principal.key.mode.value, KeyMode, "mode")
    if principal.is_test and mode is KeyMode.LIVE:
        raise ValidationError("A test-mode key can create only test-mode keys.")
    domain_id = await _own_domain(principal, services, fields.get("domain_id"))
    created = await services.teams.create_key(
        principal.team_id, name.strip(), mode, permission, domain_id
    )
    return json_response({**api_key_record(created.key), "token": created.token}, 201)


async def _own_domain(principal: Principal, services: Services, domain_id: object) -> str | None:
    """A ``domain_id`` must name one of the team's own domains."""
    if domain_id is None:
        return None
    if not isinstance(domain_id, str):
        raise ValidationError("'domain_id' must be the id of one of this team's domains.")
    try:
        return (await services.domains.get(principal, domain_id)).id
    except NotFound:
        raise ValidationError(f"Domain {domain_id!r} was not found; see GET /domains.") from None


def _choice(value: object, enum: type[E], name: str) -> E:
    try:
        return enum(str(value))
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise ValidationError(f"'{name}' must be one of: {allowed}.") from None


@router.get(
    "/api-keys",
    tags=["api-keys"],
    summary="List API keys (never their tokens)",
    responses={200: {"model": ApiKeyList}, **ERRORS},
)
async def list_api_keys(principal: FullPrincipal, services: ServicesDep) -> Response:
    return listing([api_key_record(k) for k in await services.teams.list_keys(principal.team_id)])


@router.delete(
    "/api-keys/{key_id}",
    tags=["api-keys"],
    summary="Revoke an API key",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def revoke_api_key(key_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    await services.teams.revoke_key(key_id, principal.team_id)
    return deleted("api_key", key_id)
