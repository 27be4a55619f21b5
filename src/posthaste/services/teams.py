"""Teams: creation, limits, and the first run's team with its keys (keys: ``api_keys.py``)."""

from __future__ import annotations

from posthaste.core.api_keys import NewApiKey
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import KeyMode, Stream, Team
from posthaste.core.streams import DEFAULT_STREAMS
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.services.api_keys import ApiKeyService, CreatedKey
from posthaste.storage import streams as streams_repo
from posthaste.storage import teams as teams_repo
from posthaste.storage.database import KEYS_CHANNEL, Database, Tx

DEFAULT_RATE_LIMIT = 10
# The first run's team belongs to the operator running Posthaste (on a laptop, the developer
# trying it): a per-team rate limit protects a shared server from one tenant, which is not their
# case, and 10 requests/s (reads included) trips a plain sequential script. So no rate limit,
# like the daily quota; `posthaste teams update default --rate-limit N` sets one.
BOOTSTRAP_RATE_LIMIT = 0


class TeamService:
    """Teams and their limits, as the operator's CLI manages them; the first run's team."""

    def __init__(self, db: Database, keys: ApiKeyService) -> None:
        self.db = db
        self.keys = keys

    async def create_team(
        self, name: str, rate_limit: int | None = None, daily_quota: int | None = None
    ) -> Team:
        _check_limits(rate_limit, daily_quota)
        team = Team(
            new_id(),
            _team_name(name),
            DEFAULT_RATE_LIMIT if rate_limit is None else rate_limit,
            daily_quota or 0,
            now_ms(),
        )
        async with self.db.transaction() as tx:
            if await teams_repo.get_team_by_name(tx, team.name) is not None:
                raise Conflict(f"A team named {team.name!r} already exists.")
            await teams_repo.insert_team(tx, team)
            await _create_default_streams(tx, team.id, team.created_at)
        return team

    async def update_team(self, name: str, rate_limit: int | None, daily_quota: int | None) -> Team:
        _check_limits(rate_limit, daily_quota)
        async with self.db.transaction() as tx:
            team = await self._team(tx, name)
            await teams_repo.update_team_limits(
                tx, team.id, rate_limit=rate_limit, daily_quota=daily_quota
            )
            tx.notify(KEYS_CHANNEL)
            updated = await teams_repo.get_team_by_name(tx, name)
        assert updated is not None
        return updated

    async def list_teams(self) -> list[Team]:
        async with self.db.read() as tx:
            return await teams_repo.list_teams(tx)

    async def team_by_name(self, name: str) -> Team:
        async with self.db.read() as tx:
            return await self._team(tx, name)

    async def _team(self, tx: Tx, name: str) -> Team:
        team = await teams_repo.get_team_by_name(tx, name)
        if team is None:
            raise NotFound(f"No team named {name!r}.")
        return team

    async def bootstrap(self) -> list[CreatedKey] | None:
        """On an empty database: team ``default``, without a rate limit or daily quota, with a
        live and a test key (else None)."""
        async with self.db.read() as tx:
            if await teams_repo.count_teams(tx):
                return None
        try:
            team = await self.create_team("default", rate_limit=BOOTSTRAP_RATE_LIMIT)
        except Conflict:
            return None  # another process bootstrapped at the same moment
        return [
            await self.keys.create(team.id, NewApiKey("default live key", KeyMode.LIVE)),
            await self.keys.create(team.id, NewApiKey("default test key", KeyMode.TEST)),
        ]


async def _create_default_streams(tx: Tx, team_id: str, now: int) -> None:
    for new in DEFAULT_STREAMS:
        await streams_repo.insert_stream(tx, Stream(new.id, team_id, new.name, new.type, now))


def _team_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned or len(cleaned) > 200 or any(ord(c) < 32 for c in cleaned):
        raise ValidationError("A team name must be 1-200 printable characters.")
    return cleaned


def _check_limits(rate_limit: int | None, daily_quota: int | None) -> None:
    for label, value in (("rate limit", rate_limit), ("daily quota", daily_quota)):
        if value is not None and value < 0:
            raise ValidationError(f"The {label} must be 0 (unlimited) or more.")
