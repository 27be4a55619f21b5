"""Opaque, stable cursors for newest-first keyset pagination.

A cursor is the position of the last row served: its ``(created_at_ms, id)`` pair, which is
unique and totally ordered. The next page holds rows strictly *before* that pair, so rows that
arrive later (newer) never shift a page: pages neither skip nor repeat rows. The encoding is
URL-safe base64 of a tiny versioned text, opaque to clients; anything else fails to decode.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from posthaste.core.ids import is_uuid
from posthaste.errors import ValidationError

_VERSION = "1"
T = TypeVar("T")


@dataclass(frozen=True, order=True)
class Position:
    created_at: int
    id: str


class InvalidCursor(ValueError):
    pass


def encode_cursor(position: Position) -> str:
    raw = f"{_VERSION}:{position.created_at}:{position.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """The position a cursor names; raises InvalidCursor for anything we did not make."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
        version, created_at, row_id = text.split(":")
        position = Position(int(created_at), row_id)
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise InvalidCursor("cursor is not one this service issued") from exc
    if version != _VERSION or position.created_at < 0 or not is_uuid(row_id):
        raise InvalidCursor("cursor is not one this service issued")
    return position


def page_limit(raw: str | None, default: int) -> int:
    """SPEC: a page size outside 1..100 (or not a number) falls back to the default."""
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return value if 1 <= value <= 100 else default


@dataclass(frozen=True)
class PageRequest:
    """Resend's paging of a list: ``limit`` items after the item ``anchor`` in the list's order
    (before it when ``backwards``); no anchor is the list's start."""

    limit: int
    anchor: str | None = None
    backwards: bool = False

    @property
    def name(self) -> str:
        return "before" if self.backwards else "after"


def page_request(
    limit: str | None, after: str | None, before: str | None, default: int = 20
) -> PageRequest | None:
    """The page asked for by ``limit``, ``after`` or ``before``; None (the full set) for none.

    ``limit`` follows SPEC (outside 1..100 or not a number: the default); ``after`` and
    ``before`` together are refused.
    """
    if limit is None and not after and not before:
        return None
    if after and before:
        raise ValidationError("Give 'after' or 'before', not both.")
    size = page_limit(limit, default)
    if before:
        return PageRequest(size, before, backwards=True)
    return PageRequest(size, after or None)


def page_of(
    items: Sequence[T], request: PageRequest, id_of: Callable[[T], str], what: str
) -> tuple[list[T], bool]:
    """Resend's page of a short list held whole (an email's attachments): ``limit`` items
    after (before) the one whose id is the anchor, and whether more lie beyond it."""
    start, end = 0, len(items)
    if request.anchor is not None:
        ids = [id_of(item) for item in items]
        if request.anchor not in ids:
            raise ValidationError(f"'{request.name}' must be the id of one of the {what}.")
        at = ids.index(request.anchor)
        start, end = (0, at) if request.backwards else (at + 1, len(items))
    if request.backwards:
        chosen = list(items[max(start, end - request.limit) : end])
        return chosen, end - start > request.limit
    return list(items[start : start + request.limit]), end - start > request.limit
