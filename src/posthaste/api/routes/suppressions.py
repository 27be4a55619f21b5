"""/suppressions: the addresses a team no longer mails, added, paged, looked up and removed."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema, one_of
from posthaste.api.responses import deleted, json_response
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.suppressions import (
    CreateSuppressionRequest,
    SuppressionBatch,
    SuppressionBatchRemoval,
    SuppressionList,
    SuppressionRecord,
    SuppressionsAdded,
    SuppressionsRemoved,
)
from posthaste.core.cursors import page_limit
from posthaste.core.serialize import suppression_record
from posthaste.core.suppressions import (
    SUPPRESSION_ORIGINS,
    parse_removal_refs,
    parse_suppressed_addresses,
    parse_suppression_body,
    parse_suppression_origin,
)
from posthaste.errors import ValidationError

AFTER = "A suppression id (Resend's cursor): the page after it, newest first"
BEFORE = "Not supported here (422): page forwards with cursor or after"
NOT_SUPPORTED = {"anyOf": [{"type": "string", "maxLength": 0}]}  # an empty value is no value

router = APIRouter()


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
    origin: Annotated[str | None, Query(json_schema_extra=one_of(*SUPPRESSION_ORIGINS))] = None,
    email: str | None = None,
    after: Annotated[str | None, Query(description=AFTER)] = None,
    before: Annotated[
        str | None,
        Query(description=BEFORE, json_schema_extra=NOT_SUPPORTED),
    ] = None,
) -> Response:
    size = page_limit(limit, 50)
    wanted = parse_suppression_origin(origin or None)
    if before:
        raise ValidationError(
            "'before' is not supported on /suppressions: page forwards with 'cursor' "
            "(the last page's next_cursor) or 'after'."
        )
    if after and cursor:
        raise ValidationError("Give 'cursor' or 'after', not both.")
    page = await services.suppressions.page(
        principal, wanted, email or None, cursor, size, after or None
    )
    return json_response(
        {
            "object": "list",
            "data": [suppression_record(s) for s in page.items],
            "next_cursor": page.next_cursor,
            "has_more": page.next_cursor != "",
        }
    )


@router.post(
    "/suppressions",
    status_code=201,
    tags=["suppressions"],
    summary="Suppress an address ({email}), or several ({emails: [...]} or an array): all or none",
    responses={201: {"model": SuppressionRecord | SuppressionsAdded}, **ERRORS},
    openapi_extra=body_schema(CreateSuppressionRequest),
)
async def add_suppression(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    addresses, listed = parse_suppression_body(body)
    items = await services.suppressions.add_many(principal, addresses)
    if not listed:
        return json_response(suppression_record(items[0]), 201)
    return json_response({"object": "list", "data": [suppression_record(i) for i in items]}, 201)


@router.post(
    "/suppressions/batch/add",
    status_code=201,
    tags=["suppressions"],
    summary="Resend's batch add: {emails: [...]}, all or none",
    responses={201: {"model": SuppressionsAdded}, **ERRORS},
    openapi_extra=body_schema(SuppressionBatch),
)
async def add_suppressions(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    addresses = parse_suppressed_addresses(json_object(body).get("emails"))
    items = await services.suppressions.add_many(principal, addresses)
    return json_response({"object": "list", "data": [suppression_record(i) for i in items]}, 201)


@router.post(
    "/suppressions/batch/remove",
    tags=["suppressions"],
    summary="Resend's batch remove: {emails: [...]} or {ids: [...]}; the entries removed",
    responses={200: {"model": SuppressionsRemoved}, **ERRORS},
    openapi_extra=body_schema(SuppressionBatchRemoval),
)
async def remove_suppressions(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    refs = parse_removal_refs(json_object(body))
    items = await services.suppressions.remove_many(principal, refs)
    removed = [{"object": "suppression", "id": i.id, "deleted": True} for i in items]
    return json_response({"object": "list", "data": removed})


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
