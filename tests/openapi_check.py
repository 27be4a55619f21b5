"""Does a response body match what ``/openapi.json`` says the route returns?

The body is validated with ``jsonschema`` against the document's own schema, stricter in one
way on purpose: an object with ``properties`` may carry no other member, so a field the API
returns and the document omits is drift too.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from fastapi import FastAPI
from jsonschema import Draft202012Validator

JSON = "application/json"


def route_path(document: dict[str, Any], method: str, path: str) -> str | None:
    """The documented path template (``/emails/{email_id}``) that ``method path`` is an
    instance of; a literal segment wins over a parameter (``/domains/regions``)."""
    candidates = [
        template
        for template, operations in document["paths"].items()
        if method.lower() in operations and _template(template).fullmatch(path)
    ]
    return min(candidates, key=lambda t: (t.count("{"), t), default=None)


def _template(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


def response_schema(
    document: dict[str, Any], method: str, template: str, status: int
) -> dict[str, Any] | None:
    """The JSON schema documented for that answer, or None when it documents no JSON body."""
    operation = document["paths"].get(template, {}).get(method.lower(), {})
    answer = operation.get("responses", {}).get(str(status), {})
    schema: dict[str, Any] | None = answer.get("content", {}).get(JSON, {}).get("schema")
    return schema


def documented_statuses(document: dict[str, Any], method: str, template: str) -> set[int]:
    operation = document["paths"].get(template, {}).get(method.lower(), {})
    return {int(code) for code in operation.get("responses", {}) if code.isdigit()}


def problems(document: dict[str, Any], schema: dict[str, Any], value: Any) -> list[str]:
    """What in ``value`` the schema does not describe (empty when it matches), by the
    ``jsonschema`` library (OpenAPI 3.1's schemas are JSON Schema 2020-12)."""
    root = {**_closed(schema), "components": _closed_components(document)}
    errors = Draft202012Validator(root).iter_errors(value)
    return sorted(f"{error.json_path}: {error.message}" for error in errors)


_CLOSED: dict[int, tuple[dict[str, Any], Any]] = {}


def _closed_components(document: dict[str, Any]) -> Any:
    """The document's components with every described object closed; kept per document."""
    kept = _CLOSED.get(id(document))
    if kept is None or kept[0] is not document:
        kept = _CLOSED[id(document)] = (document, _closed(document.get("components", {})))
    return kept[1]


def _closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever an object schema lists its
    ``properties`` and says nothing of others: a member the API returns and the document
    omits is drift too. (Not in a bare ``{"required": ..., "properties": ...}`` of an anyOf,
    which speaks of some members only.)"""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(item) for key, item in schema.items()}
    described = isinstance(schema.get("properties"), dict) and schema.get("type") == "object"
    if described and "additionalProperties" not in schema:
        closed["additionalProperties"] = False
    return closed


# Every app ``create_app`` builds has the same routes, so the same document: build it once per
# test process (a few hundred milliseconds for ~150 operations), not once per test's app.
_DOCUMENTS: dict[tuple[str, ...], dict[str, Any]] = {}


def _document(app: FastAPI) -> dict[str, Any]:
    routes = tuple(
        sorted(f"{sorted(getattr(r, 'methods', ()))} {getattr(r, 'path', '')}" for r in app.routes)
    )
    if routes not in _DOCUMENTS:
        _DOCUMENTS[routes] = app.openapi()
    return _DOCUMENTS[routes]


def checking_responses(app: FastAPI) -> Callable[[httpx.Response], Awaitable[None]]:
    """An httpx response hook failing the request whose answer ``/openapi.json`` does not
    describe: an undocumented status, or a JSON body its schema does not match."""

    async def check(response: httpx.Response) -> None:
        request = response.request
        document = _document(app)
        template = route_path(document, request.method, request.url.path)
        if template is None:  # no such route: the 404 and 405 answers of the framework
            return
        where = f"{request.method} {template} answered {response.status_code}"
        found: list[str] = []
        if response.status_code not in documented_statuses(document, request.method, template):
            found = ["status not documented"]
        schema = response_schema(document, request.method, template, response.status_code)
        if schema is not None and response.headers.get("content-type", "").startswith(JSON):
            await response.aread()
            found += problems(document, schema, response.json())
        assert not found, f"{where}, which /openapi.json does not describe: {found}"

    return check


def checked_client(app: FastAPI) -> httpx.AsyncClient:
    """An in-process client of ``app`` whose every answer is checked against its
    ``/openapi.json`` (``checking_responses``); use it with ``async with``. The app serves the
    process's one document too, instead of building its own for the test's first request."""
    app.openapi_schema = _document(app)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://posthaste.test",
        event_hooks={"response": [checking_responses(app)]},
    )
