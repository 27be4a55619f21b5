"""Micro-probes of the machine: what one wake-up costs here. Every request crosses threads
(aiosqlite, FastAPI's thread pool) or processes (PostgreSQL, the load generator), so these
set the floor under every figure."""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import asyncpg

ROUNDS = 2000


async def _thread_hop() -> tuple[float, float]:
    """An event loop handing a call to a thread and awaiting the answer, as aiosqlite does."""
    loop = asyncio.get_running_loop()
    calls: queue.SimpleQueue[tuple[asyncio.Future[int], Callable[[], int]] | None]
    calls = queue.SimpleQueue()

    def worker() -> None:
        while (item := calls.get()) is not None:
            future, function = item
            loop.call_soon_threadsafe(future.set_result, function())

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(ROUNDS):
        future: asyncio.Future[int] = loop.create_future()
        calls.put((future, int))
        await future
    result = (time.perf_counter() - wall) / ROUNDS, (time.process_time() - cpu) / ROUNDS
    calls.put(None)
    thread.join()
    return result


async def _pg_round_trip(dsn: str) -> float | None:
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (OSError, asyncpg.PostgresError):
        return None
    try:
        start = time.perf_counter()
        for _ in range(ROUNDS):
            await conn.fetchval("SELECT 1")
        return (time.perf_counter() - start) / ROUNDS
    finally:
        await conn.close()


def _process_round_trip() -> float:
    """A one-byte ping-pong with a child process over a socket pair."""
    import socket

    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child answers every ping, then leaves
        parent.close()
        for _ in range(ROUNDS):
            child.recv(1)
            child.send(b"o")
        os._exit(0)
    child.close()
    start = time.perf_counter()
    for _ in range(ROUNDS):
        parent.send(b"i")
        parent.recv(1)
    elapsed = (time.perf_counter() - start) / ROUNDS
    os.waitpid(pid, 0)
    parent.close()
    return elapsed


def measure(pg_dsn: str) -> dict[str, Any]:
    hop_wall, hop_cpu = asyncio.run(_thread_hop())
    pg = asyncio.run(_pg_round_trip(pg_dsn))
    return {
        "thread_hop_us": round(hop_wall * 1e6, 1),
        "thread_hop_cpu_us": round(hop_cpu * 1e6, 1),
        "process_round_trip_us": round(_process_round_trip() * 1e6, 1),
        "asyncpg_select_1_us": None if pg is None else round(pg * 1e6, 1),
    }
