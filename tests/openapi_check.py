"""Does a response body match what ``/openapi.json`` says the route returns?

A small reader of the JSON Schema subset FastAPI and pydantic write (``$ref``, ``type``,
``properties``, ``required``, ``items``, ``anyOf``, ``additionalProperties``, ``enum``,
``const``), stricter in one way on purpose: an object with ``properties`` may carry no other
member, so a field the API returns and the document omits is drift too.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from fastapi import FastAPI

JSON = "application/json"
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "array": (list,),
    "object": (dict,),
}


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


def problems(
    document: dict[str, Any], schema: dict[str, Any], value: Any, at: str = "$"
) -> list[str]:
    """What in ``value`` the schema does not describe (empty when it matches)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return problems(document, document["components"]["schemas"][name], value, at)
    if "anyOf" in schema:
        tries = [problems(document, option, value, at) for option in schema["anyOf"]]
        return [] if any(not found for found in tries) else min(tries, key=len)
    if "const" in schema and value != schema["const"]:
        return [f"{at}: {value!r} is not {schema['const']!r}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{at}: {value!r} is not one of {schema['enum']!r}"]
    kinds = schema.get("type")
    if kinds is not None and not _is_a(value, [kinds] if isinstance(kinds, str) else kinds):
        return [f"{at}: {type(value).__name__} {value!r:.60} where the document says {kinds}"]
    if isinstance(value, dict):
        return _object_problems(document, schema, value, at)
    if isinstance(value, list) and "items" in schema:
        return [
            problem
            for index, item in enumerate(value)
            for problem in problems(document, schema["items"], item, f"{at}[{index}]")
        ]
    return []


def _object_problems(
    document: dict[str, Any], schema: dict[str, Any], value: dict[str, Any], at: str
) -> list[str]:
    members: dict[str, Any] = schema.get("properties", {})
    found = [
        f"{at}: '{name}' is missing" for name in schema.get("required", ()) if name not in value
    ]
    extra = schema.get("additionalProperties", not members)
    for name, item in value.items():
        if name in members:
            found += problems(document, members[name], item, f"{at}.{name}")
        elif isinstance(extra, dict):
            found += problems(document, extra, item, f"{at}.{name}")
        elif extra is not True:
            found.append(f"{at}.{name}: returned but not documented")
    return found


def _is_a(value: Any, kinds: list[str]) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, never to JSON Schema
        return "boolean" in kinds
    return any(isinstance(value, _TYPES[kind]) for kind in kinds)


def checking_responses(app: FastAPI) -> Callable[[httpx.Response], Awaitable[None]]:
    """An httpx response hook failing the request whose answer ``/openapi.json`` does not
    describe: an undocumented status, or a JSON body its schema does not match."""

    async def check(response: httpx.Response) -> None:
        request = response.request
        document = app.openapi()
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
