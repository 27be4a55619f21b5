"""JSON log lines on stderr: one object per line, with the logger's name and level.

Structured fields ride in ``extra={"fields": {...}}`` and land as top-level keys. What a line
was logged within rides in context variables and lands the same way: the HTTP request
(``request_id``, set by ``api.middleware.RequestLog``), the SMTP session (``session_id``, set
by ``smtp.session.MailSession``) and the email being delivered (``email_id``, set by
``services.delivery``). A context variable follows the asyncio task that set it and the tasks
it starts, so a line logged deep in a service names its request without being handed it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson

REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)
SESSION_ID: ContextVar[str | None] = ContextVar("session_id", default=None)
EMAIL_ID: ContextVar[str | None] = ContextVar("email_id", default=None)
_CONTEXT = (("request_id", REQUEST_ID), ("session_id", SESSION_ID), ("email_id", EMAIL_ID))


@contextlib.contextmanager
def logged_with(variable: ContextVar[str | None], value: str) -> Iterator[None]:
    """Every line logged in this block (and in the tasks it starts) carries ``value``."""
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def context_fields() -> dict[str, str]:
    """The context of the current line: the request, session and email it was logged within."""
    return {name: value for name, variable in _CONTEXT if (value := variable.get()) is not None}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(context_fields())
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The access log is ours (RequestLog), one JSON line per request.
    logging.getLogger("uvicorn.access").disabled = True
