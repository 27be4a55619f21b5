"""The first run's team ``default``: the operator's own, without a rate limit."""

from __future__ import annotations

import httpx

from posthaste.bootstrap import Services
from posthaste.core.models import KeyMode
from posthaste.services.teams import DEFAULT_RATE_LIMIT


async def test_the_first_run_team_has_no_rate_limit_and_a_sequential_script_is_never_429(
    services: Services, client: httpx.AsyncClient
) -> None:
    created = await services.teams.bootstrap()
    assert created is not None
    team = await services.teams.team_by_name("default")
    assert (team.rate_limit, team.daily_quota) == (0, 0)
    test_key = next(c.token for c in created if c.key.mode is KeyMode.TEST)
    headers = {"Authorization": f"Bearer {test_key}"}
    # A script sending and reading back one email after another, as fast as it can: far more
    # requests than the old default's burst of 20, none refused.
    for i in range(30):
        sent = await client.post(
            "/emails",
            headers=headers,
            json={
                "from": "hello@acme.test",
                "to": "delivered@simulator.test",
                "subject": f"n{i}",
                "text": "hi",
            },
        )
        assert sent.status_code == 200, sent.text
        read = await client.get(f"/emails/{sent.json()['id']}", headers=headers)
        assert read.status_code == 200, read.text
    assert await services.teams.bootstrap() is None  # only once


async def test_teams_the_operator_creates_keep_the_default_rate_limit(
    services: Services,
) -> None:
    await services.teams.bootstrap()
    team = await services.teams.create_team("acme")
    assert team.rate_limit == DEFAULT_RATE_LIMIT == 10
