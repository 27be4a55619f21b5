"""/api-keys, /streams and /suppressions."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, listing
from posthaste.api.schemas.admin import (
    ApiKeyList,
    CreateApiKeyRequest,
    CreatedApiKey,
    CreateStreamRequest,
    CreateSuppressionRequest,
    StreamList,
    StreamRecord,
    SuppressionList,
    SuppressionRecord,
    UpdateStreamRequest,
)
from posthaste.api.schemas.common import Deleted
from posthaste.bootstrap import Services
from posthaste.core.cursors import page_limit
from posthaste.core.ids import format_ms
from posthaste.core.models import ApiKey, KeyMode, Permission, Principal
from posthaste.core.serialize import stream_record, suppression_record
from posthaste.errors import NotFound, ValidationError

router = APIRouter()
E = TypeVar("E", KeyMode, Permission)


def _key_record(key: ApiKey) -> dict[str, Any]:
    return {
        "object": "api_key",
        "id": key.id,
        "name": key.name,
        "mode": key.mode.value,
        "permission": key.permission.value,
        "domain_id": key.domain_id,
        "token_hint": key.token_hint,
        "created_at": format_ms(key.created_at),
    }


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
    return json_response({**_key_record(created.key), "token": created.token}, 201)


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
    return listing([_key_record(k) for k in await services.teams.list_keys(principal.team_id)])


@router.delete(
    "/api-keys/{key_id}",
    tags=["api-keys"],
    summary="Revoke an API key",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def revoke_api_key(key_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    await services.teams.revoke_key(key_id, principal.team_id)
    return deleted("api_key", key_id)


@router.post(
    "/streams",
    status_code=201,
    tags=["streams"],
    summary="Create a message stream",
    responses={201: {"model": StreamRecord}, **ERRORS},
    openapi_extra=body_schema(CreateStreamRequest),
)
async def create_stream(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    fields = json_object(body)
    stream = await services.streams.create(
        principal, fields.get("id"), fields.get("name"), fields.get("type")
    )
    return json_response(stream_record(stream), 201)


@router.get(
    "/streams",
    tags=["streams"],
    summary="List message streams",
    responses={200: {"model": StreamList}, **ERRORS},
)
async def list_streams(principal: FullPrincipal, services: ServicesDep) -> Response:
    return listing([stream_record(s) for s in await services.streams.all(principal)])


@router.get(
    "/streams/{stream_id}",
    tags=["streams"],
    summary="Get a message stream",
    responses={200: {"model": StreamRecord}, **ERRORS},
)
async def get_stream(stream_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(stream_record(await services.streams.get(principal, stream_id)))


@router.patch(
    "/streams/{stream_id}",
    tags=["streams"],
    summary="Rename a message stream",
    responses={200: {"model": StreamRecord}, **ERRORS},
    openapi_extra=body_schema(UpdateStreamRequest),
)
async def update_stream(
    stream_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    stream = await services.streams.rename(principal, stream_id, json_object(body).get("name"))
    return json_response(stream_record(stream))


@router.delete(
    "/streams/{stream_id}",
    tags=["streams"],
    summary="Delete a message stream",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_stream(
    stream_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    await services.streams.delete(principal, stream_id)
    return deleted("stream", stream_id)


@router.get(
    "/suppressions",
    tags=["suppressions"],
    summary="List suppressions (cursor pagination)",
    responses={200: {"model": SuppressionList}, **ERRORS},
)
async def list_suppressions(
    principal: FullPrincipal,
    services: ServicesDep,
    limit: Annotated[str | None, Query(description="1-100, default 50")] = None,
    cursor: str | None = None,
    origin: str | None = None,
    email: str | None = None,
) -> Response:
    page = await services.suppressions.page(
        principal, origin or None, email or None, cursor, page_limit(limit, 50)
    )
    return json_response(
        {
            "object": "list",
            "data": [suppression_record(s) for s in page.items],
            "next_cursor": page.next_cursor,
        }
    )


@router.post(
    "/suppressions",
    status_code=201,
    tags=["suppressions"],
    summary="Suppress an address",
    responses={201: {"model": SuppressionRecord}, **ERRORS},
    openapi_extra=body_schema(CreateSuppressionRequest),
)
async def add_suppression(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    item = await services.suppressions.add(principal, json_object(body).get("email"))
    return json_response(suppression_record(item), 201)


@router.get(
    "/suppressions/{id_or_email}",
    tags=["suppressions"],
    summary="Get a suppression",
    responses={200: {"model": SuppressionRecord}, **ERRORS},
)
async def get_suppression(
    id_or_email: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    return json_response(
        suppression_record(await services.suppressions.get(principal, id_or_email))
    )


@router.delete(
    "/suppressions/{id_or_email}",
    tags=["suppressions"],
    summary="Remove a suppression",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def remove_suppression(
    id_or_email: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    item = await services.suppressions.remove(principal, id_or_email)
    return deleted("suppression", item.id)
