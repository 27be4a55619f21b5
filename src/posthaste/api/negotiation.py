"""Content negotiation: what an ``Accept`` header asks for."""

from __future__ import annotations


def wants_json(accept: str | None) -> bool:
    """Whether ``Accept`` names ``application/json`` with a non-zero quality.

    Resend's SDKs send ``Accept: application/json`` and read an attachment's JSON record; a
    browser, ``curl`` (``*/*``) or no header at all get the file itself.
    """
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
