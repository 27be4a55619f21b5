"""/emails: send, batch, list, get, events, attachments, raw, reschedule, cancel."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from email.utils import encode_rfc2231
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from posthaste.api.deps import (
    FullPrincipal,
    JsonBody,
    JsonBodyOnce,
    ResendPage,
    SendingPrincipal,
    ServicesDep,
    json_body_once,
    json_object,
    sending_principal,
)
from posthaste.api.errors import answer_to
from posthaste.api.negotiation import wants_json
from posthaste.api.openapi import (
    ADDRESS_FILTER,
    ADDRESS_OR_NONE,
    CURSOR_RULE,
    ERRORS,
    TAG_FILTER,
    TIME_OR_ID,
    body_schema,
    one_of,
)
from posthaste.api.responses import json_response, listing, page
from posthaste.api.schemas.emails import (
    AttachmentList,
    BatchResult,
    EmailList,
    EmailRecord,
    EventList,
    RescheduleRequest,
    SendEmailRequest,
)
from posthaste.bootstrap import Services
from posthaste.core.addresses import parse_address
from posthaste.core.cursors import PageRequest, page_limit, page_request
from posthaste.core.idempotency import IdempotencyKey, body_fingerprint, idempotency_key
from posthaste.core.ids import is_uuid, now_ms, parse_rfc3339
from posthaste.core.models import AttachmentInfo, Email, Origin
from posthaste.core.send_request import SendRequest, parse_send_request
from posthaste.core.serialize import attachment_record, disposition, email_record, event_record
from posthaste.core.status import EmailStatus
from posthaste.errors import PosthasteError, ValidationError
from posthaste.services.idempotency import Replay
from posthaste.storage.emails import EmailFilter

router = APIRouter(tags=["emails"])
MAX_BATCH = 100
# Not blank (HTTP trims a header's value), no control characters.
IDEMPOTENCY_KEY = r"^\s*[^\x00-\x1f\x7f\s][^\x00-\x1f\x7f]*$"


@router.post(
    "/emails",
    summary="Send an email",
    responses={200: {"model": EmailRecord}, **ERRORS},
    openapi_extra=body_schema(SendEmailRequest),
)
async def send_email(
    principal: SendingPrincipal,
    services: ServicesDep,
    body: JsonBodyOnce,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="1-256 characters, no control characters; kept 24 hours",
            json_schema_extra={
                "anyOf": [{"type": "string", "maxLength": 256, "pattern": IDEMPOTENCY_KEY}]
            },
        ),
    ] = None,
) -> Response:
    fields = body.take()
    key = None if idempotency_key is None else _idempotency_key(idempotency_key, fields)
    request = parse_send_request(fields, now_ms())
    del fields  # the body's text goes: a large request holds its attachments decoded, not both
    accepted = await services.sending.accept(principal.sender, Origin.API, request, idempotency=key)
    if isinstance(accepted, Replay):
        return Response(accepted.body, media_type="application/json")
    return json_response(email_record(accepted))


@router.post(
    "/emails/batch",
    summary="Send up to 100 emails; each item succeeds or fails on its own",
    responses={200: {"model": BatchResult}, **ERRORS},
    openapi_extra=body_schema(SendEmailRequest, array=True),
)
async def send_batch(
    principal: SendingPrincipal,
    services: ServicesDep,
    body: JsonBodyOnce,
    batch_validation: Annotated[str | None, Header(alias="x-batch-validation")] = None,
) -> Response:
    # SPEC: the Idempotency-Key header is ignored here; batch items have no idempotency keys.
    now = now_ms()
    items = _batch_items(body.take(), now)
    outcomes = await services.sending.accept_batch(principal.sender, Origin.BATCH, items)
    entries = [_batch_entry(i, o) for i, o in enumerate(outcomes)]
    result: dict[str, Any] = {"data": entries}
    # Items always stand alone (SPEC), whichever mode Resend's SDKs ask for; 'permissive' also
    # gets Resend's list of the failed items beside the per-item entries.
    if (batch_validation or "").strip().lower() == "permissive":
        result["errors"] = [
            {"index": e["index"], "message": e["error"]["message"]} for e in entries if "error" in e
        ]
    return json_response(result)


async def _send_email_directly(request: Request, services: Services) -> Response:
    """``send_email`` with its dependencies called as FastAPI solves them, in its order."""
    principal = await sending_principal(request, services)
    body = await json_body_once(request)
    return await send_email(principal, services, body, request.headers.get("idempotency-key"))


async def _send_batch_directly(request: Request, services: Services) -> Response:
    """``send_batch`` likewise."""
    principal = await sending_principal(request, services)
    body = await json_body_once(request)
    return await send_batch(principal, services, body, request.headers.get("x-batch-validation"))


_DIRECT: dict[str, Callable[[Request, Services], Awaitable[Response]]] = {
    "/emails": _send_email_directly,
    "/emails/batch": _send_batch_directly,
}


class SendPaths:
    """``POST /emails`` and ``POST /emails/batch`` answered ahead of FastAPI's routing (a pure
    ASGI middleware inside the request log, the body limit and the 500 handler, as
    ``tracking.TrackingPaths``): the app's NUL check, the caller (key and rate limit) and the
    body, in the order FastAPI solves them, then the routes' own functions; a domain error
    answered as the app's handler answers it, anything else raised to the 500 handler as from
    a route. Matching the route among every router's and solving its dependencies were a fifth
    of a lone send's CPU in the API process (bench/README.md). A request with ``%00`` in its
    query goes on to the routes (a 422 before the key is checked), as does every other path;
    the routes also describe both in the OpenAPI document."""

    def __init__(self, app: ASGIApp, services: Services, routes: list[APIRoute]) -> None:
        self.app = app
        self.services = services
        self.routes = {
            r.path: r for r in routes if r.path in _DIRECT and "POST" in (r.methods or ())
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _direct(scope):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        scope["route"] = self.routes[path]  # the request log's and the metrics' route
        request = Request(scope, receive)
        try:
            response = await _DIRECT[path](request, self.services)
        except PosthasteError as exc:
            response = answer_to(exc)
        await response(scope, receive, send)


def _direct(scope: Scope) -> bool:
    """A request ``SendPaths`` answers as the routes would: a ``POST`` of one of its paths
    exactly, no ``%00`` in the query (``deps.refuse_nul_in_url``), no root path."""
    return (
        scope["type"] == "http"
        and scope["method"] == "POST"
        and scope["path"] in _DIRECT
        and not scope.get("root_path")
        and b"%00" not in scope["query_string"]
    )


def _idempotency_key(header: str, body: object) -> IdempotencyKey:
    """The ``Idempotency-Key`` header, guarding this exact body."""
    return idempotency_key(header, body_fingerprint(body))


def _batch_items(body: object, now: int) -> list[SendRequest | PosthasteError]:
    """Each item parsed; the body goes when this returns (nothing else holds it)."""
    if not isinstance(body, list):
        raise ValidationError("The batch body must be a JSON array of 1 to 100 email objects.")
    if not 1 <= len(body) <= MAX_BATCH:
        raise ValidationError(f"A batch holds 1 to {MAX_BATCH} emails; this one has {len(body)}.")
    return [_parsed(item, now) for item in body]


def _parsed(item: object, now: int) -> SendRequest | PosthasteError:
    try:
        return parse_send_request(item, now)
    except PosthasteError as exc:
        return exc


def _batch_entry(index: int, outcome: Email | PosthasteError) -> dict[str, Any]:
    if isinstance(outcome, PosthasteError):
        return {"index": index, "error": {"name": outcome.name, "message": outcome.message}}
    return {"index": index, "id": outcome.id}


@router.get(
    "/emails",
    summary="List emails, newest first (cursor pagination)",
    responses={200: {"model": EmailList}, **ERRORS},
)
async def list_emails(
    principal: FullPrincipal,
    services: ServicesDep,
    limit: Annotated[str | None, Query(description="1-100, default 20")] = None,
    cursor: str | None = None,
    status: Annotated[
        str | None, Query(json_schema_extra=one_of(*(s.value for s in EmailStatus)))
    ] = None,
    to: Annotated[
        str | None, Query(description=ADDRESS_FILTER, json_schema_extra=ADDRESS_OR_NONE)
    ] = None,
    from_: Annotated[
        str | None,
        Query(alias="from", description=ADDRESS_FILTER, json_schema_extra=ADDRESS_OR_NONE),
    ] = None,
    subject: str | None = None,
    tag: Annotated[str | None, Query(description="key:value", json_schema_extra=TAG_FILTER)] = None,
    stream_id: str | None = None,
    after: Annotated[
        str | None,
        Query(
            description="RFC 3339: created strictly after; or an email id: the page after it."
            + CURSOR_RULE,
            json_schema_extra=TIME_OR_ID,
        ),
    ] = None,
    before: Annotated[
        str | None,
        Query(
            description="RFC 3339: created strictly before; or an email id: the page before it."
            + CURSOR_RULE,
            json_schema_extra=TIME_OR_ID,
        ),
    ] = None,
) -> Response:
    flt, anchor = email_filter(
        limit, status, to, from_, subject, tag, stream_id, after=after, before=before
    )
    page = await services.emails.page(principal, flt, cursor, page_limit(limit, 20), anchor=anchor)
    return json_response(
        {
            "object": "list",
            "data": [email_record(e) for e in page.items],
            "next_cursor": page.next_cursor,
            "has_more": page.has_more,
        }
    )


def email_filter(
    limit: str | None,
    status: str | None,
    to: str | None,
    from_: str | None,
    subject: str | None,
    tag: str | None,
    stream_id: str | None,
    *,
    after: str | None,
    before: str | None,
) -> tuple[EmailFilter, PageRequest | None]:
    """``GET /emails``'s filters (the dashboard's too), and Resend's id anchor if one is given."""
    after_at, after_id = time_or_id(after, "after")
    before_at, before_id = time_or_id(before, "before")
    anchor = page_request(limit, after_id, before_id) if after_id or before_id else None
    flt = EmailFilter(
        status=_status(status),
        to=lookup_filter(to, "to"),
        from_=lookup_filter(from_, "from"),
        subject=subject or None,
        tag=_tag(tag),
        stream_id=stream_id or None,
        after=after_at,
        before=before_at,
    )
    return flt, anchor


def _status(value: str | None) -> str | None:
    if not value:
        return None
    if value not in {s.value for s in EmailStatus}:
        raise ValidationError(
            f"Unknown status {value!r}; one of: {', '.join(s.value for s in EmailStatus)}."
        )
    return value


def lookup_filter(value: str | None, name: str) -> str | None:
    return parse_address(value, name).lookup_key if value else None


def _tag(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    key, sep, tag_value = value.partition(":")
    if not sep or not key:
        raise ValidationError("'tag' must be written key:value.")
    return key, tag_value


def _timestamp(value: str | None, name: str) -> int | None:
    if not value:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        raise ValidationError(f"'{name}' must be an RFC 3339 timestamp with a time zone.") from None


def time_or_id(value: str | None, name: str) -> tuple[int | None, str | None]:
    """SPEC's time filter (an RFC 3339 timestamp), or Resend's cursor (an email id)."""
    if not value:
        return None, None
    try:
        return parse_rfc3339(value), None
    except ValueError:
        pass
    if is_uuid(value):
        return None, value
    raise ValidationError(
        f"'{name}' must be an RFC 3339 timestamp with a time zone, or an email id."
    )


@router.get(
    "/emails/{email_id}", summary="Get an email", responses={200: {"model": EmailRecord}, **ERRORS}
)
async def get_email(email_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(email_record(await services.emails.get(principal, email_id)))


@router.patch(
    "/emails/{email_id}",
    summary="Reschedule a queued or scheduled email",
    responses={200: {"model": EmailRecord}, **ERRORS},
    openapi_extra=body_schema(RescheduleRequest),
)
async def reschedule_email(
    email_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    fields = json_object(body)
    if "scheduled_at" not in fields:
        raise ValidationError(
            "Only 'scheduled_at' can be changed: give a timestamp, or null to send now."
        )
    raw = fields["scheduled_at"]
    if raw is not None and not isinstance(raw, str):
        raise ValidationError("'scheduled_at' must be an RFC 3339 timestamp or null.")
    when = _timestamp(raw, "scheduled_at") if raw else None
    email = await services.email_changes.reschedule(principal, email_id, when)
    return json_response(email_record(email))


@router.post(
    "/emails/{email_id}/cancel",
    summary="Cancel a queued or scheduled email",
    responses={200: {"model": EmailRecord}, **ERRORS},
)
async def cancel_email(email_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(email_record(await services.email_changes.cancel(principal, email_id)))


@router.get(
    "/emails/{email_id}/events",
    summary="The email's event timeline, oldest first",
    responses={200: {"model": EventList}, **ERRORS},
)
async def email_events(email_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return listing([event_record(e) for e in await services.emails.events(principal, email_id)])


@router.get(
    "/emails/{email_id}/attachments",
    summary="List the email's attachments in message order: all, or a page with limit, "
    "after or before",
    responses={200: {"model": AttachmentList}, **ERRORS},
)
async def email_attachments(
    email_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    items, more = await services.emails.attachments(principal, email_id, request)
    return page([attachment_record(a) for a in items], more)


@router.get(
    "/emails/{email_id}/attachments/{attachment_id}",
    summary="Download an attachment (its JSON record with a signed link when the request asks "
    "for JSON: Accept: application/json, or a JSON Content-Type)",
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
async def download_attachment(
    email_id: str,
    attachment_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    accept: Annotated[str | None, Header()] = None,
    content_type: Annotated[str | None, Header()] = None,
) -> Response:
    if wants_json(accept, content_type):
        details = await services.emails.attachment_details(principal, email_id, attachment_id)
        return json_response(attachment_record(details))
    info, data = await services.emails.attachment(principal, email_id, attachment_id)
    return attachment_download(info, data)


def attachment_download(info: AttachmentInfo, data: bytes) -> Response:
    """The attachment's bytes, as a browser or a script saves them."""
    return Response(
        data,
        media_type=info.content_type,
        headers={"Content-Disposition": _disposition(disposition(info), info.filename)},
    )


def _disposition(kind: str, filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "'").replace("\\", "_")
    return f'{kind}; filename="{ascii_name}"; filename*={encode_rfc2231(filename, "utf-8")}'


@router.get(
    "/emails/{email_id}/raw",
    summary="The exact RFC 5322 message sent",
    responses={200: {"content": {"message/rfc822": {}}}, **ERRORS},
)
async def raw_email(email_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return Response(await services.emails.raw(principal, email_id), media_type="message/rfc822")
