"""Content negotiation: what an ``Accept`` header asks for."""

from __future__ import annotations


def wants_json(accept: str | None, content_type: str | None = None) -> bool:
    """Whether a GET asks for JSON: ``Accept`` names ``application/json`` with a non-zero
    quality, or the request declares a JSON ``Content-Type`` though it has no body.

    Resend's SDKs read an attachment's JSON record: the Python SDK sends ``Accept:
    application/json``; the Node SDK sends ``Accept: */*`` with ``Content-Type:
    application/json`` on every request, GETs included. A browser, ``curl`` or a plain script
    sends no ``Content-Type`` on a GET, and gets the file itself.
    """
    if content_type is not None and _media(content_type) == "application/json":
        return True
    return _accepts_json(accept)


def _media(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _accepts_json(accept: str | None) -> bool:
    for part in (accept or "").split(","):
        media, *params = (piece.strip() for piece in part.split(";"))
        if media.lower() != "application/json":
            continue
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False
