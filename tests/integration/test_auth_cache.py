"""Remembered keys: a revocation or a limit change reaches every process at once."""

from __future__ import annotations

import asyncio

import pytest

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.errors import InvalidApiKey
from tests.conftest import make_tenant


async def _notified(services: Services, action: object) -> None:
    """Run ``action`` (a coroutine) and wait until ``services`` hears of it."""
    heard = asyncio.Event()
    services.db.add_listener("posthaste_keys", heard.set)
    assert asyncio.iscoroutine(action)
    await action
    await asyncio.wait_for(heard.wait(), 5)


@pytest.mark.parametrize("backend", ["postgres"])  # SQLite serves one process: no fleet
async def test_changes_made_by_another_process_apply_at_once(settings: Settings) -> None:
    api = build_services(settings)
    other = build_services(settings)  # e.g. the CLI, or another API process
    await api.db.start_listening()
    try:
        tenant = await make_tenant(api)
        test_key = await api.api_keys.authenticate(tenant.test)  # both remembered by `api` now
        assert (await api.api_keys.authenticate(tenant.live)).team.rate_limit == 0

        await _notified(api, other.api_keys.revoke(test_key.key.id))
        with pytest.raises(InvalidApiKey):
            await api.api_keys.authenticate(tenant.test)

        await _notified(api, other.teams.update_team(tenant.team.name, 3, None))
        assert (await api.api_keys.authenticate(tenant.live)).team.rate_limit == 3
    finally:
        await other.close()
        await api.close()
