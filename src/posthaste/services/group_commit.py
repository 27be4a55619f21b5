"""Group commit: concurrent callers share one database transaction.

Thirty-two clients each sending one email would otherwise pay for thirty-two transactions
(begin, the same handful of statements, commit, and on SQLite a turn of the write lock each).
``GroupCommit`` queues what arrives while a transaction is running and hands the whole queue to
the next one, so under load each transaction carries many callers' work and at rest a lone
caller is served at once (no timer, no added latency). Every caller gets its own result; an
error of the shared transaction (the database is down, say) reaches every caller in it.

With ``runs`` above one, that many groups may be in flight at once, each taking what waits when
it starts: while one group's statement runs in the database, the next one's checks and rows are
built, and a database with several cores (PostgreSQL, one backend per connection) writes both.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """Runs ``run(items)`` for whatever is waiting, at most ``max_weight`` per call and at most
    ``runs`` calls at once."""

    def __init__(
        self,
        run: Callable[[list[T]], Awaitable[Sequence[R]]],
        *,
        weight: Callable[[T], int],
        max_weight: int,
        runs: int = 1,
    ) -> None:
        if runs < 1:
            raise ValueError("runs must be at least 1")
        self._run = run
        self._weight = weight
        self._max_weight = max_weight
        self._runs = runs
        self._waiting: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._drainers: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if len(self._drainers) < self._runs:
            drainer = asyncio.create_task(self._drain(), name="group-commit")
            self._drainers.add(drainer)
            # Forgotten when it ends (``_drain``), or if it is cancelled before it starts.
            drainer.add_done_callback(self._drainers.discard)
        return await future

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        group = [self._waiting.popleft()]
        total = self._weight(group[0][0])
        while self._waiting and total + self._weight(self._waiting[0][0]) <= self._max_weight:
            item = self._waiting.popleft()
            total += self._weight(item[0])
            group.append(item)
        return group

    async def _drain(self) -> None:
        try:
            await self._drain_waiting()
        finally:
            # At once, not in a done callback (those come later): a caller arriving after the
            # loop found nothing left must start a drainer of its own.
            self._drainers.discard(asyncio.current_task())

    async def _drain_waiting(self) -> None:
        while self._waiting:
            group = [(item, future) for item, future in self._take() if not future.done()]
            if not group:
                continue
            try:
                results = await self._run([item for item, _ in group])
            except Exception as exc:
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(group, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def close(self) -> None:
        """Wait for the transactions in flight (if any) to finish."""
        for drainer in list(self._drainers):
            with contextlib.suppress(Exception):
                await drainer
