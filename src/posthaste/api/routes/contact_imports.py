"""/contacts/imports: a CSV of contacts imported by a job, and the imports' progress.

The body is the CSV itself (``Content-Type: text/csv``), or Resend's SDKs' form upload (the CSV
in the ``file`` part), read as it streams in (at most the 25 MiB every request may carry),
checked whole and stored before the 202: a bad file stores nothing and answers at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, ResendPage, ServicesDep
from posthaste.api.openapi import ERRORS, ID_OR_NONE, one_of
from posthaste.api.responses import json_response, page
from posthaste.api.schemas.contact_imports import ContactImportList, ContactImportRecord
from posthaste.api.streamed import streamed_listing
from posthaste.core.contact_imports import parse_form_upload, parse_on_conflict
from posthaste.core.form_data import parse_form_data
from posthaste.core.ids import is_uuid
from posthaste.core.models import Principal
from posthaste.core.serialize import contact_import_record
from posthaste.errors import ValidationError
from posthaste.services.contact_imports import ContactImportService

CSV_TYPES = ("text/csv", "application/csv")
ON_CONFLICT = "What a line does to a contact that exists: upsert (the default) or skip"
SEGMENT = "A segment every imported contact joins"

router = APIRouter(tags=["contacts"])
ONE = {200: {"model": ContactImportRecord}, **ERRORS}
CSV_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/csv": {"schema": {"type": "string", "format": "binary"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "on_conflict": {"type": "string", "enum": ["upsert", "skip"]},
                        "segments": {"type": "string", "description": 'JSON: [{"id": ...}]'},
                    },
                }
            },
        },
    }
}


@router.post(
    "/contacts/imports",
    status_code=202,
    summary="Import contacts from a CSV (header row: email, first_name, last_name, "
    "unsubscribed, other columns are properties; name:number types a column)",
    responses={202: {"model": ContactImportRecord}, **ERRORS},
    openapi_extra=CSV_BODY,
)
async def create_import(
    request: Request,
    principal: FullPrincipal,
    services: ServicesDep,
    on_conflict: Annotated[
        str | None, Query(description=ON_CONFLICT, json_schema_extra=one_of("upsert", "skip"))
    ] = None,
    segment_id: Annotated[
        str | None, Query(description=SEGMENT, json_schema_extra=ID_OR_NONE)
    ] = None,
) -> Response:
    conflict = parse_on_conflict(on_conflict)
    segments = _segment_ids(segment_id)
    content_type = request.headers.get("content-type", "")
    form = _is_form(content_type)
    body = await _read_body(request)
    if form:
        upload = parse_form_upload(parse_form_data(body, content_type))
        body = upload.file.cut_out()
        conflict = upload.on_conflict or conflict
        segments = tuple(dict.fromkeys((*segments, *upload.segment_ids)))
    item = await services.contact_imports.start(principal, body, conflict, segments)
    return json_response(contact_import_record(item), 202)


def _segment_ids(segment_id: str | None) -> tuple[str, ...]:
    if not segment_id:
        return ()
    if not is_uuid(segment_id):
        raise ValidationError(f"'segment_id' names {segment_id!r}, which is not a segment id.")
    return (segment_id.lower(),)


def _is_form(header: str) -> bool:
    """Whether the body is Resend's form upload (else the CSV itself, which must be UTF-8)."""
    media, *params = (part.strip().lower() for part in header.split(";"))
    if media == "multipart/form-data":
        return True
    if media not in CSV_TYPES:
        raise ValidationError("Send the CSV as the body with 'Content-Type: text/csv'.")
    for param in params:
        name, _, value = param.partition("=")
        if name.strip() == "charset" and value.strip().strip('"') not in ("utf-8", "utf8"):
            raise ValidationError("The CSV must be UTF-8 ('charset=utf-8', or no charset).")
    return False


async def _read_body(request: Request) -> bytearray:
    """The body as it streams in, held once (the body limit stops it past 25 MiB)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
    return body


@router.get(
    "/contacts/imports",
    summary="List contact imports, newest first: the full set, or a page with limit, after "
    "or before",
    responses={200: {"model": ContactImportList}, **ERRORS},
)
async def list_imports(
    principal: FullPrincipal, services: ServicesDep, request: ResendPage
) -> Response:
    if request is None:
        records = _records(services.contact_imports, principal)
        return await streamed_listing(records, has_more=False)
    items, more = await services.contact_imports.page(principal, request)
    return page([contact_import_record(i) for i in items], more)


async def _records(
    imports: ContactImportService, principal: Principal
) -> AsyncIterator[dict[str, Any]]:
    async for item in imports.stream(principal):
        yield contact_import_record(item)


@router.get(
    "/contacts/imports/{import_id}",
    summary="Get a contact import: its status, counts and first 100 line errors",
    responses=ONE,
)
async def get_import(import_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(
        contact_import_record(await services.contact_imports.get(principal, import_id))
    )
