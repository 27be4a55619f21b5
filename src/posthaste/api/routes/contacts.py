"""/contacts: a team's contacts, created, listed (all, or one segment's), read, edited and
deleted. ``{id_or_email}`` is the contact's id or its address (any case)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.contacts import (
    ContactList,
    ContactRecord,
    CreateContactRequest,
    UpdateContactRequest,
)
from posthaste.api.streamed import streamed_listing
from posthaste.core.contacts import parse_contact_changes, parse_new_contact
from posthaste.core.cursors import PageRequest
from posthaste.core.models import Principal
from posthaste.core.serialize import contact_record
from posthaste.services.contacts import ContactService

SEGMENT = "Only the members of this segment"

router = APIRouter(tags=["contacts"])
ONE = {200: {"model": ContactRecord}, **ERRORS}
UPDATE_BODY = body_schema(UpdateContactRequest)


@router.post(
    "/contacts",
    status_code=201,
    summary="Create a contact",
    responses={201: {"model": ContactRecord}, **ERRORS},
    openapi_extra=body_schema(CreateContactRequest),
)
async def create_contact(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    contact = await services.contacts.create(principal, parse_new_contact(json_object(body)))
    return json_response(contact_record(contact), 201)


@router.get(
    "/contacts",
    summary="List contacts, oldest first: the full set, or a page with limit, after or before",
    responses={200: {"model": ContactList}, **ERRORS},
)
async def list_contacts(
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
    segment_id: Annotated[str | None, Query(description=SEGMENT)] = None,
) -> Response:
    return await contact_listing(services.contacts, principal, segment_id or None, request)


async def contact_listing(
    contacts: ContactService,
    principal: Principal,
    segment_id: str | None,
    request: PageRequest | None,
) -> Response:
    """The contacts (of a segment): streamed whole, or the page asked for."""
    if request is None:
        return await streamed_listing(_records(contacts, principal, segment_id), has_more=False)
    items, more = await contacts.page(principal, segment_id, request)
    return page([contact_record(c) for c in items], more)


async def _records(
    contacts: ContactService, principal: Principal, segment_id: str | None
) -> AsyncIterator[dict[str, Any]]:
    async for contact in contacts.stream(principal, segment_id):
        yield contact_record(contact)


@router.get("/contacts/{id_or_email}", summary="Get a contact by id or address", responses=ONE)
async def get_contact(
    id_or_email: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    return json_response(contact_record(await services.contacts.get(principal, id_or_email)))


@router.patch(
    "/contacts/{id_or_email}",
    summary="Edit a contact",
    responses=ONE,
    openapi_extra=UPDATE_BODY,
)
async def update_contact(
    id_or_email: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    changes = parse_contact_changes(json_object(body))
    contact = await services.contacts.update(principal, id_or_email, changes)
    return json_response(contact_record(contact))


@router.delete(
    "/contacts/{id_or_email}",
    summary="Delete a contact (with its memberships and topic choices)",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_contact(
    id_or_email: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    removed = await services.contacts.delete(principal, id_or_email)
    return deleted("contact", removed.id)
