"""Unsubscribe links (no key; the signed token is the credential): ``GET`` shows the page,
``POST`` unsubscribes in one request (RFC 8058: a mail client posts
``List-Unsubscribe=One-Click``) or, from the page's topic form, saves the contact's topics.
A GET never changes anything, so a link scanner cannot unsubscribe anyone."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse

from posthaste.api.deps import ServicesDep
from posthaste.api.openapi import ERRORS, PUBLIC
from posthaste.api.unsubscribe_page import HEADERS, unsubscribe_page

router = APIRouter(tags=["unsubscribe"])
PAGE: dict[int | str, dict[str, Any]] = {200: {"content": {"text/html": {}}}, 404: ERRORS[404]}


@router.get(
    "/unsubscribe/{token}",
    summary="The unsubscribe page of a contact",
    responses=PAGE,
    openapi_extra=PUBLIC,
)
async def unsubscribe_form(token: str, services: ServicesDep) -> HTMLResponse:
    preferences = await services.unsubscribe.preferences(token)
    return HTMLResponse(unsubscribe_page(token, preferences), headers=HEADERS)


@router.post(
    "/unsubscribe/{token}",
    summary="Unsubscribe in one click (RFC 8058), or save the topic choices of the page's form",
    responses=PAGE,
    openapi_extra=PUBLIC,
)
async def unsubscribe(token: str, request: Request, services: ServicesDep) -> HTMLResponse:
    form = _form(await request.body(), request.headers.get("content-type", ""))
    if form.get("action") == ["topics"]:
        preferences = await services.unsubscribe.choose_topics(token, set(form.get("topic", [])))
        notice = "Your choices are saved."
    else:
        preferences = await services.unsubscribe.unsubscribe(token)
        notice = "You are unsubscribed."
    return HTMLResponse(unsubscribe_page(token, preferences, notice), headers=HEADERS)


def _form(body: bytes, content_type: str) -> dict[str, list[str]]:
    """An urlencoded form's fields; any other body (a multipart one-click post) is none."""
    if not content_type.startswith("application/x-www-form-urlencoded"):
        return {}
    return parse_qs(body.decode("utf-8", "replace"), max_num_fields=200)
