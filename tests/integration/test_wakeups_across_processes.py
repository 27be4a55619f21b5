"""A commit in one process wakes the listeners of another on the same database: ``NOTIFY`` on
PostgreSQL, the ``PRAGMA data_version`` watch on SQLite (``posthaste serve`` runs several
processes on one SQLite file). Two ``Database`` handles stand for two processes."""

from __future__ import annotations

import asyncio

from posthaste.bootstrap import Services, build_services
from posthaste.storage.database import KEYS_CHANNEL
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
