"""Request dependencies: the services, the caller (authenticated and rate limited), JSON bodies."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import Depends, Query, Request

from posthaste.api.middleware import MAX_BODY_BYTES
from posthaste.api.openapi import PAGE_LIMIT
from posthaste.bootstrap import Services
from posthaste.core.cursors import PageRequest, page_request
from posthaste.core.large_bodies import NotJson, large_body_text, parse_large_json
from posthaste.core.models import Permission, Principal
from posthaste.errors import MissingApiKey, NotFound, RestrictedApiKey, ValidationError


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain ``def`` dependency in a worker thread, a round trip per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def sending_principal(request: Request, services: ServicesDep) -> Principal:
    """Any valid key (``sending_access`` is enough); counts against the team's rate limit."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise MissingApiKey()
    principal = await services.api_keys.authenticate(token.strip())
    await services.rate_limiter.check(principal)
    request.state.principal = principal
    return principal


async def full_principal(principal: Annotated[Principal, Depends(sending_principal)]) -> Principal:
    """A ``full_access`` key: every endpoint other than sending."""
    if principal.key.permission is Permission.SENDING_ACCESS:
        raise RestrictedApiKey()
    return principal


SendingPrincipal = Annotated[Principal, Depends(sending_principal)]
FullPrincipal = Annotated[Principal, Depends(full_principal)]


async def json_body(request: Request) -> Any:
    """The parsed JSON body; malformed or empty JSON is a 422, never a 500. A large body is
    parsed from its text after its bytes were let go (``core.large_bodies``): two copies of
    it at most, where orjson holds three."""
    raw = await _received(request)
    if not raw or raw.isspace():  # ``strip()`` would copy a large body
        raise ValidationError("The request body is empty; send a JSON document.")
    if len(raw) >= LARGE_BODY_BYTES:
        return _parsed_large(raw)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"The request body is not valid JSON: {exc}.") from None
    if b"\\u0000" in raw and _holds_nul(parsed):
        raise ValidationError(NUL_REFUSED)
    return parsed


JsonBody = Annotated[Any, Depends(json_body)]

LARGE_BODY_BYTES = 1024 * 1024


async def _received(request: Request) -> bytearray:
    """The body in one buffer of its own: not kept by the request (``Request.body()`` keeps
    it until the response is sent), so that a large one can be let go once parsed. Sized by
    ``Content-Length`` when there is one (a growing buffer reserves an eighth more)."""
    body = bytearray(_declared_length(request))
    filled = 0
    async for chunk in request.stream():
        body[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    del body[filled:]
    return body


def _declared_length(request: Request) -> int:
    try:
        declared = int(request.headers.get("content-length", "0"))
    except ValueError:
        return 0
    return declared if 0 < declared <= MAX_BODY_BYTES else 0


def _parsed_large(raw: bytearray) -> Any:
    try:
        text = large_body_text(raw)  # empties ``raw``
        parsed = parse_large_json(text)
    except NotJson as exc:
        raise ValidationError(f"The request body is not valid JSON: {exc}.") from None
    if text.escapes and "\\u0000" in text.text and _holds_nul(parsed):
        raise ValidationError(NUL_REFUSED)
    return parsed


class Once:
    """A parsed JSON body that a handler takes once: FastAPI holds every dependency's value
    until the response is sent, and a large body's text should go as soon as it is read into
    a request (its attachments decoded)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def take(self) -> Any:
        value, self._value = self._value, None
        return value


async def json_body_once(request: Request) -> Once:
    return Once(await json_body(request))


JsonBodyOnce = Annotated[Once, Depends(json_body_once)]

# PostgreSQL's text cannot hold NUL, and no header, address or name needs it: refused everywhere,
# on both backends, before anything is stored or looked up.
NUL_REFUSED = "Text may not contain NUL (U+0000); remove it."


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


async def refuse_nul_in_url(request: Request) -> None:
    """A NUL (``%00``) in the path names nothing (404, like any id that does not exist); in the
    query string it is a 422, whatever the route."""
    if "\x00" in request.url.path:
        raise NotFound()
    if "%00" in request.url.query:
        raise ValidationError(NUL_REFUSED)


async def optional_json_object(request: Request) -> dict[str, Any]:
    """A JSON object body that may be left out (an action's optional parameters): ``{}``."""
    if not (await request.body()).strip():
        return {}
    return json_object(await json_body(request))


OptionalJsonObject = Annotated[dict[str, Any], Depends(optional_json_object)]


def json_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValidationError("The request body must be a JSON object.")
    return body


async def resend_page(
    limit: Annotated[str | None, Query(description=PAGE_LIMIT)] = None,
    after: Annotated[
        str | None, Query(description="The id of one of the list's items: the page after it")
    ] = None,
    before: Annotated[
        str | None, Query(description="The id of one of the list's items: the page before it")
    ] = None,
) -> PageRequest | None:
    """Resend's paging of a list (``limit``, ``after``/``before`` ids); None: the full set."""
    return page_request(limit, after, before)


ResendPage = Annotated[PageRequest | None, Depends(resend_page)]
