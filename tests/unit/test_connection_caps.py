"""``Caps``: at most a limit of holders per key, and nothing kept for a key no one uses."""

from __future__ import annotations

import asyncio
import contextlib

from posthaste.adapters.smtp_client import Caps


async def test_a_key_takes_at_most_its_limit_and_is_forgotten_when_idle() -> None:
    caps: Caps[str] = Caps()
    inside: list[str] = []
    release, two_in = asyncio.Event(), asyncio.Event()

    async def session(name: str) -> None:
        async with caps.hold("mx.example.com", 2):
            inside.append(name)
            if len(inside) == 2:
                two_in.set()
            await release.wait()

    tasks = [asyncio.create_task(session(str(i))) for i in range(3)]
    async with asyncio.timeout(10):
        await two_in.wait()
    for _ in range(20):  # the third has every chance to get in, were it allowed
        await asyncio.sleep(0)
    assert len(inside) == 2 and len(caps) == 1
    release.set()
    await asyncio.gather(*tasks)
    assert len(inside) == 3 and len(caps) == 0


async def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    caps: Caps[str] = Caps()
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with caps.hold("k", 1):
            held.set()
            await release.wait()

    first = asyncio.create_task(holder())
    await held.wait()
    waiter = asyncio.create_task(holder())
    for _ in range(5):
        await asyncio.sleep(0)
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    release.set()
    await first
    assert len(caps) == 0


async def test_a_key_that_fell_idle_takes_the_next_holders_limit() -> None:
    caps: Caps[str] = Caps()
    async with caps.hold("k", 1):
        pass
    inside = 0
    release, all_in = asyncio.Event(), asyncio.Event()

    async def session() -> None:
        nonlocal inside
        async with caps.hold("k", 3):
            inside += 1
            if inside == 3:
                all_in.set()
            await release.wait()

    tasks = [asyncio.create_task(session()) for _ in range(3)]
    async with asyncio.timeout(10):  # with the first holder's limit of 1, never
        await all_in.wait()
    release.set()
    await asyncio.gather(*tasks)
