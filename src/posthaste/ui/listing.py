"""What the list pages share: the services, and paging a list by item id (Resend's ``after``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlencode

from starlette.requests import Request

from posthaste.bootstrap import Services
from posthaste.core.cursors import PageRequest

PAGE_SIZE = 50


class Identified(Protocol):
    @property
    def id(self) -> str: ...


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def id_page(request: Request) -> PageRequest:
    """The page after the item named by ``?after=`` (the list's start without it)."""
    return PageRequest(PAGE_SIZE, request.query_params.get("after") or None)


def next_link(path: str, items: Sequence[Identified], more: bool, **params: str) -> str:
    """The link to the page after this one, or "" at the end of the list."""
    if not more or not items:
        return ""
    kept = {k: v for k, v in params.items() if v}
    return f"{path}?{urlencode({**kept, 'after': items[-1].id})}"


def cursor_link(path: str, cursor: str, **params: str) -> str:
    """The link to the page a ``next_cursor`` names, or "" at the end of the list."""
    if not cursor:
        return ""
    kept = {k: v for k, v in params.items() if v}
    return f"{path}?{urlencode({**kept, 'cursor': cursor})}"
