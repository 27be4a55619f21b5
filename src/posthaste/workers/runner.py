"""The worker runner: claims due jobs in batches and runs them, woken by the database.

No slow poll: a committed job wakes the runner at once (in-process on SQLite, LISTEN/NOTIFY on
PostgreSQL). When nothing is due, the runner sleeps until the earliest job (a scheduled email,
a retry, or a lease running out) falls due, and at most ``idle_check`` seconds as a safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping

from posthaste.core.ids import now_ms
from posthaste.core.models import Job
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Database

log = logging.getLogger(__name__)

Handler = Callable[[Job], Awaitable[None]]


class Worker:
    def __init__(
        self,
        db: Database,
        handlers: Mapping[str, Handler],
        *,
        lease_seconds: float,
        batch_size: int = 32,
        idle_check: float = 30.0,
    ) -> None:
        self.db = db
        self.handlers = dict(handlers)
        self.lease_ms = int(lease_seconds * 1000)
        self.batch_size = batch_size
        self.idle_check = idle_check
        self.name = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._wake = asyncio.Event()
        self._stopping = False
        self.processed = 0
        db.add_listener(jobs_repo.CHANNEL, self._wake.set)

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Claim and run jobs until ``stop()``; a failing job never stops the loop."""
        while not self._stopping:
            self._wake.clear()
            jobs = await self._claim()
            if jobs:
                await asyncio.gather(*(self._run_one(job) for job in jobs))
                continue
            await self._sleep()

    async def run_until_idle(self) -> int:
        """Run every job due now, then return how many ran (for tests and the CLI)."""
        before = self.processed
        while jobs := await self._claim():
            await asyncio.gather(*(self._run_one(job) for job in jobs))
        return self.processed - before

    async def _claim(self) -> list[Job]:
        try:
            async with self.db.transaction() as tx:
                return await jobs_repo.claim(
                    tx, list(self.handlers), self.name, now_ms(), self.lease_ms, self.batch_size
                )
        except Exception:
            log.exception("claiming jobs failed; retrying shortly")
            await asyncio.sleep(1)
            return []

    async def _run_one(self, job: Job) -> None:
        try:
            await self.handlers[job.kind](job)
        except Exception:
            # The lease runs out and the job is claimed again; the handler decides when to give up.
            log.exception("job %s (%s %s) failed", job.id, job.kind, job.ref)
        finally:
            self.processed += 1

    async def _sleep(self) -> None:
        timeout = self.idle_check
        try:
            async with self.db.read() as tx:
                due = await jobs_repo.next_due_at(tx, list(self.handlers))
        except Exception:
            log.exception("reading the next due job failed")
            due = None
        if due is not None:
            timeout = min(timeout, max(0.0, (due - now_ms()) / 1000))
        if timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
