"""Remembered keys: a revocation or a limit change reaches every process at once."""

from __future__ import annotations

import asyncio

import pytest

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.models import ApiKey, KeyMode, Team
from posthaste.errors import InvalidApiKey
from posthaste.storage import api_keys as api_keys_repo
from posthaste.storage.database import Tx
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


async def test_requests_of_a_key_not_remembered_share_one_lookup(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await make_tenant(services)
    looked_up: list[str] = []
    find_active_key = api_keys_repo.find_active_key

    async def counted(tx: Tx, token_hash: str) -> tuple[ApiKey, Team] | None:
        looked_up.append(token_hash)
        return await find_active_key(tx, token_hash)

    monkeypatch.setattr(api_keys_repo, "find_active_key", counted)
    keys = services.api_keys
    principals = await asyncio.gather(*(keys.authenticate(tenant.test) for _ in range(20)))
    assert len(looked_up) == 1 and {p.key.token_hint for p in principals} == {tenant.test[:12]}
    assert await keys.authenticate(tenant.test) == principals[0] and len(looked_up) == 1

    refused = await asyncio.gather(
        *(keys.authenticate("ph_test_" + "x" * 32) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, InvalidApiKey) for r in refused) and len(looked_up) == 2


async def test_a_key_read_before_a_revocation_is_not_remembered(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await make_tenant(services)
    other = await services.api_keys.create(tenant.team.id, NewApiKey("other", KeyMode.TEST))
    looked_up: list[str] = []
    find_active_key = api_keys_repo.find_active_key

    async def revoking_meanwhile(tx: Tx, token_hash: str) -> tuple[ApiKey, Team] | None:
        found = await find_active_key(tx, token_hash)
        if not looked_up:  # a revocation commits while the first lookup is in flight
            await services.api_keys.revoke(other.key.id)
        looked_up.append(token_hash)
        return found

    monkeypatch.setattr(api_keys_repo, "find_active_key", revoking_meanwhile)
    await services.api_keys.authenticate(tenant.test)
    await services.api_keys.authenticate(tenant.test)  # read again: the first was not kept
    await services.api_keys.authenticate(tenant.test)
    assert len(looked_up) == 2
