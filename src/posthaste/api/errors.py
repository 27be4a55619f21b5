"""The error → HTTP table, and the handlers that turn every failure into the documented body
``{"statusCode", "name", "message"}`` with ``Content-Type: application/json``."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from posthaste.errors import (
    InternalServerError,
    LimitExceeded,
    MethodNotAllowed,
    NotFound,
    PosthasteError,
    ValidationError,
)

log = logging.getLogger(__name__)

HTTP_STATUS: dict[str, int] = {
    "validation_error": 422,
    "missing_api_key": 401,
    "invalid_api_key": 403,
    "restricted_api_key": 401,
    "domain_not_owned": 403,
    "domain_not_verified": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "invalid_idempotency_key": 400,
    "invalid_idempotent_request": 409,
    "concurrent_idempotent_requests": 409,
    "conflict": 409,
    "template_not_published": 422,
    "payload_too_large": 413,
    "rate_limit_exceeded": 429,
    "daily_quota_exceeded": 429,
    "internal_server_error": 500,
    "service_unavailable": 503,
}


def status_of(error: PosthasteError) -> int:
    return HTTP_STATUS.get(error.name, 500)


def error_body(error: PosthasteError) -> dict[str, object]:
    return {"statusCode": status_of(error), "name": error.name, "message": error.message}


def error_response(error: PosthasteError) -> Response:
    headers: dict[str, str] = {}
    if isinstance(error, LimitExceeded):
        headers = {
            "Retry-After": str(error.retry_after),
            "ratelimit-limit": str(error.limit),
            "ratelimit-remaining": "0",
            "ratelimit-reset": str(error.reset),
        }
    return Response(
        orjson.dumps(error_body(error)),
        status_code=status_of(error),
        media_type="application/json",
        headers=headers,
    )


def answer_to(error: PosthasteError) -> Response:
    """What the API answers to a domain error that ends a request (an internal one logged)."""
    if isinstance(error, InternalServerError):
        log.error("internal error: %s", error.message)
    return error_response(error)


async def _on_posthaste_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PosthasteError)
    return answer_to(exc)


async def _on_request_validation(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for item in exc.errors()[:5]:
        where = ".".join(str(part) for part in item.get("loc", ()) if part not in ("body",))
        problems.append(f"{where}: {item.get('msg', 'invalid')}" if where else str(item.get("msg")))
    return error_response(ValidationError("; ".join(problems) or "The request is invalid."))


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return error_response(NotFound("No such endpoint; see /docs for the API."))
    if exc.status_code == 405:
        response = error_response(MethodNotAllowed())
        response.headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
        return response
    error = PosthasteError(str(exc.detail))
    return Response(
        orjson.dumps({"statusCode": exc.status_code, "name": error.name, "message": error.message}),
        status_code=exc.status_code,
        media_type="application/json",
    )


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods of the resource at ``path`` (RFC 9110: a 405 carries ``Allow``). Starlette
    names only the first route whose path matched, and a path such as ``/emails`` is served by a
    route per method. Of the routes whose path matches, those of the most specific path count
    (fewest parameters): ``/contacts/imports`` is its own resource, not a contact named
    "imports", as the document describes it."""
    matching: dict[int, set[str]] = defaultdict(set)
    for route in _routes(app.router.routes):
        regex, own = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and own and regex.match(path):
            matching[len(getattr(route, "param_convertors", ()))].update(own)
    return sorted(matching[min(matching)]) if matching else []


def _routes(routes: Iterable[object]) -> Iterator[object]:
    for route in routes:
        # FastAPI keeps an included router's routes behind one entry of the app's list.
        inner = getattr(route, "original_router", None)
        yield from _routes(inner.routes) if inner is not None else (route,)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(PosthasteError, _on_posthaste_error)
    app.add_exception_handler(RequestValidationError, _on_request_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
