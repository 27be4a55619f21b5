"""The load generator: aiohttp clients in a closed loop, or requests on a fixed schedule."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import orjson

from bench.stats import Recorder

REQUEST_TIMEOUT = 60.0
Counter = Callable[[int, bytes], int]
Window = tuple[float, float]  # time.perf_counter() start and end of the measured part


def count_single(status: int, _payload: bytes) -> int:
    """``POST /emails``: a 200 answer is one accepted email."""
    return 1 if status == 200 else 0


def count_batch(status: int, payload: bytes) -> int:
    """``POST /emails/batch``: the items that came back with an id."""
    if status != 200:
        return 0
    return sum(1 for item in orjson.loads(payload)["data"] if "id" in item)


@dataclass(frozen=True)
class Target:
    """Where and what to post, and how to count what the answer accepted."""

    urls: list[str]  # one per server process; clients spread over them
    key: str
    bodies: list[bytes]
    count: Counter

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}


def session(limit: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    )


async def _post(
    http: aiohttp.ClientSession, url: str, target: Target, body: bytes
) -> tuple[int, str | None]:
    """Send one request; (accepted emails, error label or None)."""
    try:
        async with http.post(url, data=body, headers=target.headers) as response:
            payload = await response.read()
            accepted = target.count(response.status, payload)
            error = None if accepted else f"HTTP {response.status}"
            if response.status == 200 and accepted == 0:
                error = "HTTP 200 with no accepted item"
            return accepted, error
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, type(exc).__name__


async def closed_loop(target: Target, concurrency: int, window: Window) -> Recorder:
    """``concurrency`` clients, each sending its next request as soon as the last one answers,
    from now until the window ends; requests that start before the window (the warm-up) are
    not recorded."""
    recorder = Recorder()
    bodies = itertools.cycle(target.bodies)
    window_start, window_end = window

    async def client(http: aiohttp.ClientSession, url: str) -> None:
        while (start := time.perf_counter()) < window_end:
            accepted, error = await _post(http, url, target, next(bodies))
            if start >= window_start:
                recorder.add(start, time.perf_counter(), accepted, error)

    async with session(concurrency) as http:
        urls = target.urls
        await asyncio.gather(*(client(http, urls[i % len(urls)]) for i in range(concurrency)))
    return recorder


async def counted(target: Target, requests: int, concurrency: int) -> Recorder:
    """``requests`` requests in all from ``concurrency`` clients, each sending the next as soon
    as its last one answers; every request is recorded."""
    recorder = Recorder()
    bodies = itertools.cycle(target.bodies)
    left = iter(range(requests))

    async def client(http: aiohttp.ClientSession, url: str) -> None:
        for _ in left:  # shared: the clients take the requests one at a time
            start = time.perf_counter()
            accepted, error = await _post(http, url, target, next(bodies))
            recorder.add(start, time.perf_counter(), accepted, error)

    async with session(concurrency) as http:
        urls = target.urls
        await asyncio.gather(*(client(http, urls[i % len(urls)]) for i in range(concurrency)))
    return recorder


@dataclass
class OpenLoopResult:
    recorder: Recorder
    scheduled: int
    max_dispatch_lag_ms: float


async def open_loop(
    target: Target,
    rate: float,
    window: Window,
    limit: int = 256,
    stop: asyncio.Event | None = None,
) -> OpenLoopResult:
    """Requests at a fixed ``rate`` whatever the answers; latency runs from the *scheduled*
    send time, so a stalled server (or generator) shows up in the figures instead of silently
    slowing the schedule down (no coordinated omission). The schedule ends at the window's end
    or when ``stop`` is set, whichever comes first (a window may then end at infinity)."""
    recorder = Recorder()
    window_start, window_end = window
    begin = time.perf_counter()
    max_lag = 0.0
    scheduled_in_window = 0

    async def one(http: aiohttp.ClientSession, scheduled: float, index: int) -> None:
        url = target.urls[index % len(target.urls)]
        accepted, error = await _post(http, url, target, target.bodies[index % len(target.bodies)])
        if scheduled >= window_start:
            recorder.add(scheduled, time.perf_counter(), accepted, error)

    async with session(limit) as http:
        tasks: list[asyncio.Task[None]] = []
        for index in itertools.count():
            scheduled = begin + index / rate
            if scheduled >= window_end:
                break
            delay = scheduled - time.perf_counter()
            if stop is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(delay, 0))
                    break
            elif delay > 0:
                await asyncio.sleep(delay)
            if scheduled >= window_start:
                max_lag = max(max_lag, time.perf_counter() - scheduled)
                scheduled_in_window += 1
            tasks.append(asyncio.create_task(one(http, scheduled, index)))
        await asyncio.gather(*tasks)
    return OpenLoopResult(recorder, scheduled_in_window, max_lag * 1000)
