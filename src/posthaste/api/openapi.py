"""OpenAPI helpers: request bodies documented from pydantic models (bodies are parsed by hand
so that every error has our shape), the shared error responses, and the document itself."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from posthaste.api.schemas.common import MAILBOX, ErrorBody

_REF = "#/components/schemas/{model}"
_BODY_MODELS: dict[str, type[BaseModel]] = {}
# An operation that takes no API key (probes, signed links, tracking, unsubscribe pages): the
# document's default is the bearer key, so clients and validators would otherwise send one.
PUBLIC: dict[str, Any] = {"security": []}
PAGE_LIMIT = "1-100 (else 20): asks for a page instead of the full set"
CURSOR_RULE = (
    " It must be the id of one of the list's own items (else 422); 'after' and 'before' exclude "
    "each other (422 if both are given)."
)


def one_of(*values: str) -> dict[str, Any]:
    """A query parameter's allowed values, for ``Query(json_schema_extra=...)``; an empty value
    is the parameter left out."""
    return {"anyOf": [{"type": "string", "enum": [*values, ""]}]}


def comma_separated(*values: str, blanks: bool = False) -> dict[str, Any]:
    """A query parameter holding one or more of ``values``, comma-separated (spaces allowed;
    with ``blanks``, empty items too)."""
    item = "(" + "|".join(re.escape(value) for value in values) + ")" + ("?" if blanks else "")
    pattern = rf"^\s*{item}\s*(,\s*{item}\s*)*$"
    return {"anyOf": [{"type": "string", "pattern": pattern}, {"type": "string", "maxLength": 0}]}


ADDRESS_FILTER = "An address (a display name is ignored), compared case-insensitively"
ADDRESS_OR_NONE: dict[str, Any] = {
    "anyOf": [{"type": "string", "format": MAILBOX}, {"type": "string", "maxLength": 0}]
}
TAG_FILTER: dict[str, Any] = {
    "anyOf": [{"type": "string", "pattern": "^[^:]+:"}, {"type": "string", "maxLength": 0}]
}

ID_OR_NONE: dict[str, Any] = {
    "anyOf": [{"type": "string", "format": "uuid"}, {"type": "string", "maxLength": 0}]
}

# RFC 3339 with a time zone (what core.ids.parse_rfc3339 reads), or an empty value (none).
TIME_OR_ID: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "uuid"},
        {"type": "string", "maxLength": 0},
    ]
}

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "invalid_idempotency_key",
        401: "missing_api_key, restricted_api_key",
        403: "invalid_api_key, domain_not_owned, domain_not_verified",
        404: "not_found",
        409: "conflict, invalid_idempotent_request, concurrent_idempotent_requests",
        413: "payload_too_large",
        422: "validation_error, template_not_published",
        429: "rate_limit_exceeded, daily_quota_exceeded (with Retry-After)",
        500: "internal_server_error",
        503: "service_unavailable",
    }.items()
}


def body_schema(model: type[BaseModel], *, array: bool = False) -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON request body of ``model``, or an array of 1-100 items
    that each should be one: an item that is not gets its own error in the answer (200), so the
    array takes any item and names ``model`` in its description."""
    _BODY_MODELS[model.__name__] = model
    ref: dict[str, Any] = {"$ref": _REF.format(model=model.__name__)}
    item = {
        "description": f"Each a {model.__name__} ({_REF.format(model=model.__name__)}); an item "
        "that is not one gets its error in its entry of the answer, the others go ahead"
    }
    schema = {"type": "array", "items": item, "minItems": 1, "maxItems": 100} if array else ref
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_PARAM = re.compile(r"{(\w+)}")


def add_links(paths: dict[str, Any]) -> None:
    """OpenAPI links from each create (``POST /things`` answering one record) to the operations
    on that record (``/things/{id}...``): the record's ``id`` is their one path parameter. Not
    to what a sub-resource's own POST makes (``GET /domains/{id}/claim`` exists once ``POST
    /domains/{id}/claim`` made it): only to that POST."""
    for collection, operations in paths.items():
        created = _created_response(operations.get("post", {}))
        if created is None:
            continue
        links = {
            f"{method.upper()} {path}": {
                "operationId": operation["operationId"],
                "parameters": {name: "$response.body#/id"},
            }
            for path, name in _record_paths(paths, collection)
            for method, operation in paths[path].items()
            if not _made_later(paths, path, method, name)
        }
        if links:
            created["links"] = links


def _made_later(paths: dict[str, Any], path: str, method: str, name: str) -> bool:
    """Whether ``method path`` needs a sub-resource that a POST on it or above it makes: a path
    below the record (``/domains/{domain_id}/claim...``) whose POST answers a record and that
    takes other methods too."""
    record, _, below = path.partition("{" + name + "}")
    parts = [part for part in below.split("/") if part]
    for depth in range(1, len(parts) + 1):
        made = record + "{" + name + "}/" + "/".join(parts[:depth])
        operations = paths.get(made, {})
        own_post = "post" in operations and _created_response(operations["post"]) is not None
        if own_post and len(operations) > 1 and (made, method) != (path, "post"):
            return True
    return False


def _record_paths(paths: dict[str, Any], collection: str) -> list[tuple[str, str]]:
    """The paths under ``collection/{name}`` that take no other parameter, with ``name``."""
    found = []
    for path in paths:
        head = path.removeprefix(collection + "/").partition("/")[0]
        if path.startswith(collection + "/{") and _PARAM.findall(path) == [head.strip("{}")]:
            found.append((path, head.strip("{}")))
    return found


def _created_response(operation: dict[str, Any]) -> dict[str, Any] | None:
    """The 201 (or 200) answer of a create whose body is one record with an ``id``."""
    for status in ("201", "200"):
        answer = operation.get("responses", {}).get(status)
        ref = answer and answer.get("content", {}).get("application/json", {}).get("schema", {})
        if ref and "$ref" in ref:
            return answer  # type: ignore[no-any-return]
    return None


def install_openapi(app: FastAPI) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, routes=app.routes, description=app.description
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for name, model in _BODY_MODELS.items():
                schema = model.model_json_schema(ref_template=_REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[name] = schema
            document["components"]["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "description": "API key"}
            }
            document["security"] = [{"bearer": []}]
            add_links(document["paths"])
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]
