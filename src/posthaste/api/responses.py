"""JSON responses rendered with orjson (fast, and always ``application/json``)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


def json_response(
    content: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(content),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )


def deleted(kind: str, item_id: str) -> Response:
    return json_response({"object": kind, "id": item_id, "deleted": True})


def listing(items: list[dict[str, Any]]) -> Response:
    return json_response({"object": "list", "data": items})


def page(items: list[dict[str, Any]], has_more: bool) -> Response:
    """One page of a list as Resend answers it: the items and whether more lie beyond."""
    return json_response({"object": "list", "data": items, "has_more": has_more})
