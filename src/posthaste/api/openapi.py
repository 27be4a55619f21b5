"""OpenAPI helpers: request bodies documented from pydantic models (bodies are parsed by hand
so that every error has our shape), the shared error responses, and the document itself."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from posthaste.api.schemas.common import ErrorBody

_REF = "#/components/schemas/{model}"
_BODY_MODELS: dict[str, type[BaseModel]] = {}
# An operation that takes no API key (probes, signed links, tracking, unsubscribe pages): the
# document's default is the bearer key, so clients and validators would otherwise send one.
PUBLIC: dict[str, Any] = {"security": []}
PAGE_LIMIT = "1-100 (else 20): asks for a page instead of the full set"

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
    """``openapi_extra`` declaring a JSON request body of ``model`` (or an array of them)."""
    _BODY_MODELS[model.__name__] = model
    ref: dict[str, Any] = {"$ref": _REF.format(model=model.__name__)}
    schema = {"type": "array", "items": ref, "minItems": 1, "maxItems": 100} if array else ref
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


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
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]
