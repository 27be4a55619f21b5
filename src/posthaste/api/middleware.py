"""Pure ASGI middleware: the 25 MiB body limit and request ids with one JSON log line each."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from posthaste.api.errors import error_body, status_of
from posthaste.errors import (
    InternalServerError,
    PayloadTooLarge,
    PosthasteError,
    ServiceUnavailable,
)
from posthaste.logs import REQUEST_ID
from posthaste.services.metrics import UNMATCHED_ROUTE, Metrics

log = logging.getLogger("posthaste.access")

MAX_BODY_BYTES = 25 * 1024 * 1024


class BodyTooLarge(PayloadTooLarge):
    """Raised from ``receive`` once a streamed body passes the limit."""


class MemoryBudget:
    """The bytes of large request bodies one process works on at once. A large body is held in
    memory up to twice while it is parsed, decoded and stored (its text and what is parsed
    from it), so fifty 25 MiB requests at once would take gigabytes: beyond the
    budget, a request waits for room (first come, first served), and after ``wait`` seconds it
    is answered 503 with ``Retry-After``. A body is always let in when nothing else is in
    flight, so one larger than the whole budget still gets through alone."""

    def __init__(self, total: int, wait: float = 30.0) -> None:
        self.total = total
        self.wait = wait
        self.used = 0
        self._room = asyncio.Condition()

    async def take(self, size: int) -> bool:
        """Hold ``size`` bytes; False when no room came within ``wait`` seconds."""
        async with self._room:
            try:
                await asyncio.wait_for(
                    self._room.wait_for(lambda: self.used == 0 or self.used + size <= self.total),
                    self.wait,
                )
            except TimeoutError:
                return False
            self.used += size
            return True

    async def give_back(self, size: int) -> None:
        async with self._room:
            self.used -= size
            self._room.notify_all()


LARGE_BODY_BYTES = 1024 * 1024  # smaller bodies are not counted: the hot path stays as it was


class BodyLimit:
    """Refuses bodies over the limit before reading them whole: by Content-Length at once, or
    by counting a chunked body as it streams in. Large bodies also take their size from the
    process's ``MemoryBudget`` (when there is one) for as long as the request runs."""

    def __init__(
        self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES, budget: MemoryBudget | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _send_413(send)
            return
        seen = 0
        held = 0

        async def limited_receive() -> Message:
            nonlocal seen, held
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge()
                if self.budget is not None and seen > held >= LARGE_BODY_BYTES:
                    # A chunked body larger than announced (or not announced): more room.
                    more = min(self.max_bytes, max(seen, 2 * held)) - held
                    if not await self.budget.take(more):
                        raise Busy()
                    held += more
            return message

        if self.budget is not None and declared is not None and declared >= LARGE_BODY_BYTES:
            if not await self.budget.take(declared):
                await _send_503(send)
                return
            held = declared
        try:
            await self.app(scope, limited_receive, send)
        finally:
            if held and self.budget is not None:
                await self.budget.give_back(held)


class Busy(ServiceUnavailable):
    """Raised from ``receive`` when a streamed body found no room in the memory budget."""

    retry_after = 5

    def __init__(self) -> None:
        super().__init__("Too many large requests at once; retry shortly.")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_503(send: Send) -> None:
    await _send_error(send, Busy(), [(b"retry-after", str(Busy.retry_after).encode())])


async def _send_413(send: Send) -> None:
    await _send_error(send, PayloadTooLarge())


async def _send_error(
    send: Send, error: PosthasteError, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """The documented error body, sent before the request's body was read (so the connection
    closes after it: what is left of the body is not read)."""
    body = orjson.dumps(error_body(error))
    await send(
        {
            "type": "http.response.start",
            "status": status_of(error),
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class CatchAll:
    """Turns any unexpected exception into the documented 500 body; the details go to the log
    only. (Starlette's own handler would re-raise after answering, logging every error twice.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], scope["path"])
            if started:
                raise
            body = orjson.dumps(error_body(InternalServerError()))
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})


class RequestLog:
    """Gives each request an id (``X-Request-Id``, kept when the caller sends a sane one) that
    every log line of the request carries, logs one JSON line when it ends, and times it for
    ``posthaste_http_request_seconds`` under its route's template (``/emails/{email_id}``,
    never the raw path: one series per route, ``unmatched`` for any path no route answers)."""

    def __init__(self, app: ASGIApp, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _incoming_id(scope) or uuid.uuid4().hex
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        token = REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            if self.metrics is not None:
                self.metrics.http_request(_route_of(scope), status, seconds)
            if log.isEnabledFor(logging.INFO):
                fields = {
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "ms": round(seconds * 1000, 2),
                }
                log.info(
                    "%s %s %s", scope["method"], scope["path"], status, extra={"fields": fields}
                )
            REQUEST_ID.reset(token)


def _route_of(scope: Scope) -> str:
    """The template of the route that answered (the router records it in the scope)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED_ROUTE


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text: str = value.decode("latin-1")
            if 0 < len(text) <= 128 and text.replace("-", "").isalnum():
                return text
    return None
