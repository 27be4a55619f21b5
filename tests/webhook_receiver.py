"""A real HTTP receiver on loopback (aiohttp) that records webhook requests, as a customer's would.

``statuses`` is a queue of status codes to answer with (then ``default_status``); ``hold`` makes
every request wait until released (a slow endpoint); ``redirect_to`` answers 302.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str = ""
    statuses: list[int] = field(default_factory=list)
    default_status: int = 200
    hold: asyncio.Event | None = None
    requests: list[Received] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            body = await request.read()
            if self.hold is not None:
                await self.hold.wait()
            self.requests.append(Received(dict(request.headers), body))
            self.changed.set()
            status = self.statuses.pop(0) if self.statuses else self.default_status
            if 300 <= status < 400:
                return web.Response(status=status, headers={"Location": self.url + "/moved"})
            return web.Response(status=status, text=f"answer {status}")
        finally:
            self.in_flight -= 1


@asynccontextmanager
async def running_receiver(**options: object) -> AsyncIterator[Receiver]:
    """A receiver listening on 127.0.0.1 on a free port; ``url`` is set once it listens."""
    receiver = Receiver(**options)  # type: ignore[arg-type]
    app = web.Application()
    app.router.add_post("/{tail:.*}", receiver.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        if receiver.hold is not None:
            receiver.hold.set()
        await runner.cleanup()


async def eventually(
    condition: Callable[[], Awaitable[bool] | bool], *, within: float = 15.0, what: str = ""
) -> None:
    """Wait (bounded) until ``condition`` holds, polling; fails with ``what`` on timeout."""
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await asyncio.sleep(0.02)
