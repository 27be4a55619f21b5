"""Resend's older audience paths, answered by segments: an audience is a segment.

Resend's Python SDK still calls them (``Audiences.*``, and ``Contacts.*`` given an
``audience_id``): ``/audiences`` creates, lists, reads and deletes segments, and
``/audiences/{id}/contacts`` creates a contact in the segment, lists its members, and reads,
edits or deletes a contact (the contact itself: an audience's contact is the team's contact).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import json_response
from posthaste.api.routes import contacts, segments
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.contacts import AudienceContactRequest, ContactList, ContactRecord
from posthaste.api.schemas.segments import SegmentList, SegmentRecord, SegmentRequest
from posthaste.core.contacts import parse_new_contact
from posthaste.core.serialize import contact_record

router = APIRouter(tags=["audiences (Resend's older name for segments)"])
SEGMENT: dict[int | str, dict[str, Any]] = {200: {"model": SegmentRecord}, **ERRORS}
CONTACT: dict[int | str, dict[str, Any]] = {200: {"model": ContactRecord}, **ERRORS}
DELETED: dict[int | str, dict[str, Any]] = {200: {"model": Deleted}, **ERRORS}
# The contact routes' handlers take no segment: the document must still name the path's parameter.
ANY_SEGMENT: dict[str, Any] = {
    "parameters": [
        {
            "name": "segment_id",
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": "Any segment: an audience's contact is the team's contact",
        }
    ]
}

router.add_api_route(
    "/audiences", segments.create_segment, methods=["POST"], status_code=201,
    summary="Create a segment (Resend's audience)",
    responses={201: {"model": SegmentRecord}, **ERRORS},
    openapi_extra=body_schema(SegmentRequest),
)  # fmt: skip
router.add_api_route(
    "/audiences", segments.list_segments, methods=["GET"], summary="List segments",
    responses={200: {"model": SegmentList}, **ERRORS},
)  # fmt: skip
router.add_api_route(
    "/audiences/{segment_id}", segments.get_segment, methods=["GET"], summary="Get a segment",
    responses=SEGMENT,
)  # fmt: skip
router.add_api_route(
    "/audiences/{segment_id}", segments.delete_segment, methods=["DELETE"],
    summary="Delete a segment (its contacts stay)", responses=DELETED,
)  # fmt: skip
router.add_api_route(
    "/audiences/{segment_id}/contacts", segments.list_segment_contacts, methods=["GET"],
    summary="List a segment's contacts", responses={200: {"model": ContactList}, **ERRORS},
)  # fmt: skip


@router.post(
    "/audiences/{segment_id}/contacts",
    status_code=201,
    summary="Create a contact in a segment",
    responses={201: {"model": ContactRecord}, **ERRORS},
    openapi_extra=body_schema(AudienceContactRequest),
)
async def create_audience_contact(
    segment_id: Annotated[
        str, Path(description="One of your segments", json_schema_extra={"format": "uuid"})
    ],
    principal: FullPrincipal,
    services: ServicesDep,
    body: JsonBody,
) -> Response:
    fields = {**json_object(body), "segments": [segment_id]}
    contact = await services.contacts.create(principal, parse_new_contact(fields))
    return json_response(contact_record(contact), 201)


router.add_api_route(
    "/audiences/{segment_id}/contacts/{id_or_email}", contacts.get_contact, methods=["GET"],
    summary="Get a contact by id or address", responses=CONTACT, openapi_extra=ANY_SEGMENT,
)  # fmt: skip
router.add_api_route(
    "/audiences/{segment_id}/contacts/{id_or_email}", contacts.update_contact,
    methods=["PATCH"], summary="Edit a contact", responses=CONTACT,
    openapi_extra={**contacts.UPDATE_BODY, **ANY_SEGMENT},
)  # fmt: skip
router.add_api_route(
    "/audiences/{segment_id}/contacts/{id_or_email}", contacts.delete_contact,
    methods=["DELETE"], summary="Delete a contact", responses=DELETED,
    openapi_extra=ANY_SEGMENT,
)  # fmt: skip
