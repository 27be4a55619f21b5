"""A commit in one process wakes the listeners of another on the same database: ``NOTIFY`` on
PostgreSQL, the wake files on SQLite (``posthaste serve`` runs several
processes on one SQLite file). Two ``Database`` handles stand for two processes."""

from __future__ import annotations

import asyncio

from posthaste.bootstrap import Services, build_services
from posthaste.core.ids import now_ms
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import JOBS_CHANNEL, KEYS_CHANNEL
from tests.conftest import Tenant


async def test_a_commit_in_one_process_wakes_the_others(services: Services, tenant: Tenant) -> None:
    other = build_services(services.settings)
    heard = asyncio.Event()
    other.db.add_listener(KEYS_CHANNEL, heard.set)
    await other.db.start_listening()
    try:
        await services.teams.update_team(tenant.team.name, 5, None)
        await asyncio.wait_for(heard.wait(), 10)
    finally:
        await other.close()


async def test_a_commit_wakes_only_the_channels_it_names(services: Services) -> None:
    """An accepted email wakes the workers of the other processes, not their caches of API
    keys (which would then read every key again)."""
    other = build_services(services.settings)
    jobs_heard, keys_heard = asyncio.Event(), asyncio.Event()
    other.db.add_listener(JOBS_CHANNEL, jobs_heard.set)
    other.db.add_listener(KEYS_CHANNEL, keys_heard.set)
    await other.db.start_listening()
    try:
        now = now_ms()
        async with services.db.transaction() as tx:
            await jobs_repo.enqueue(tx, "test_job", "ref", None, now, now)
        await asyncio.wait_for(jobs_heard.wait(), 10)
        assert not keys_heard.is_set()  # heard in the same look as the jobs', had it woken
    finally:
        await other.close()
