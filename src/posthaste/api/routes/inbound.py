"""/emails/received (and Resend's /emails/receiving): received mail, its attachments, its source.

Registered before ``/emails/{email_id}`` so that ``received`` is never read as an email id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header, Query
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, ResendPage, ServicesDep
from posthaste.api.negotiation import wants_json
from posthaste.api.openapi import ADDRESS_FILTER, ADDRESS_OR_NONE, CURSOR_RULE, ERRORS, TIME_OR_ID
from posthaste.api.responses import json_response, page
from posthaste.api.routes.emails import attachment_download, lookup_filter, time_or_id
from posthaste.api.schemas.emails import AttachmentList
from posthaste.api.schemas.inbound import ReceivedEmailList, ReceivedEmailRecord
from posthaste.core.cursors import page_limit, page_request
from posthaste.core.serialize import attachment_record, received_email_record
from posthaste.storage.inbound import ReceivedFilter

router = APIRouter(tags=["inbound"])
PREFIXES = ("/emails/received", "/emails/receiving")  # ours (SPEC), Resend's
F = TypeVar("F", bound=Callable[..., Any])


def both(path: str, **options: Any) -> Callable[[F], F]:
    """Serve ``path`` under SPEC's prefix and under Resend's."""

    def register(handler: F) -> F:
        for prefix in PREFIXES:
            router.get(prefix + path, **options)(handler)
        return handler

    return register


@both(
    "",
    summary="List received emails, newest first (cursor pagination)",
    responses={200: {"model": ReceivedEmailList}, **ERRORS},
)
async def list_received(
    principal: FullPrincipal,
    services: ServicesDep,
    limit: Annotated[str | None, Query(description="1-100, default 20")] = None,
    cursor: str | None = None,
    to: Annotated[
        str | None,
        Query(description="A recipient (To, Cc or envelope)", json_schema_extra=ADDRESS_OR_NONE),
    ] = None,
    from_: Annotated[
        str | None,
        Query(alias="from", description=ADDRESS_FILTER, json_schema_extra=ADDRESS_OR_NONE),
    ] = None,
    after: Annotated[
        str | None,
        Query(
            description="RFC 3339: received strictly after; or an id: the page after it."
            + CURSOR_RULE,
            json_schema_extra=TIME_OR_ID,
        ),
    ] = None,
    before: Annotated[
        str | None,
        Query(
            description="RFC 3339: received strictly before; or an id: the page before it."
            + CURSOR_RULE,
            json_schema_extra=TIME_OR_ID,
        ),
    ] = None,
) -> Response:
    after_at, after_id = time_or_id(after, "after")
    before_at, before_id = time_or_id(before, "before")
    anchor = page_request(limit, after_id, before_id) if after_id or before_id else None
    flt = ReceivedFilter(
        to=lookup_filter(to, "to"),
        from_=lookup_filter(from_, "from"),
        after=after_at,
        before=before_at,
    )
    found = await services.received.page(
        principal, flt, cursor, page_limit(limit, 20), anchor=anchor
    )
    return json_response(
        {
            "object": "list",
            "data": [received_email_record(e) for e in found.items],
            "next_cursor": found.next_cursor,
            "has_more": found.has_more,
        }
    )


@both(
    "/{email_id}",
    summary="Get a received email",
    responses={200: {"model": ReceivedEmailRecord}, **ERRORS},
)
async def get_received(email_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    item = await services.received.get(principal, email_id)
    return json_response(received_email_record(item, services.received.raw_link(item)))


@both(
    "/{email_id}/attachments",
    summary="List a received email's attachments in message order: all, or a page with "
    "limit, after or before",
    responses={200: {"model": AttachmentList}, **ERRORS},
)
async def received_attachments(
    email_id: str, principal: FullPrincipal, services: ServicesDep, request: ResendPage
) -> Response:
    items, more = await services.received.attachments(principal, email_id, request)
    return page([attachment_record(a) for a in items], more)


@both(
    "/{email_id}/attachments/{attachment_id}",
    summary="Download a received attachment, byte for byte (its JSON record with a signed link "
    "when the request asks for JSON)",
    responses={
        200: {
            "content": {
                "application/octet-stream": {},
                "application/json": {"schema": {"$ref": "#/components/schemas/AttachmentRecord"}},
            }
        },
        **ERRORS,
    },
)
async def received_attachment(
    email_id: str,
    attachment_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    accept: Annotated[str | None, Header()] = None,
    content_type: Annotated[str | None, Header()] = None,
) -> Response:
    if wants_json(accept, content_type):
        details = await services.received.attachment_details(principal, email_id, attachment_id)
        return json_response(attachment_record(details))
    info, data = await services.received.attachment(principal, email_id, attachment_id)
    return attachment_download(info, data)


@both(
    "/{email_id}/raw",
    summary="The message as received, with our Authentication-Results field on top",
    responses={200: {"content": {"message/rfc822": {}}}, **ERRORS},
)
async def received_raw(email_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    data = await services.received.raw(principal, email_id)
    return Response(data, media_type="message/rfc822")
