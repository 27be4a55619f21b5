"""Teams and API keys: creation, authentication, revocation, first-run bootstrap."""

from __future__ import annotations

import hashlib
import secrets
import string
import time
from collections.abc import Sequence
from dataclasses import dataclass

from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import ApiKey, KeyMode, Permission, Principal, Stream, Team
from posthaste.errors import Conflict, InvalidApiKey, NotFound, ValidationError
from posthaste.storage import streams as streams_repo
from posthaste.storage import teams as teams_repo
from posthaste.storage.database import KEYS_CHANNEL, Database, Tx

_BASE62 = string.ascii_letters + string.digits
PRINCIPAL_CACHE_SECONDS = 5.0
PRINCIPAL_CACHE_SIZE = 10_000
DEFAULT_RATE_LIMIT = 10
DEFAULT_STREAMS = (
    ("transactional", "Transactional", "transactional"),
    ("broadcast", "Broadcast", "broadcast"),
)


def generate_token(mode: KeyMode) -> str:
    """``ph_live_`` or ``ph_test_`` followed by 32 base62 characters (~190 bits)."""
    return f"ph_{mode.value}_" + "".join(secrets.choice(_BASE62) for _ in range(32))


def hash_token(token: str) -> str:
    """Keys are stored as SHA-256 only: they are high-entropy, so no slow hash is needed."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    token: str


class TeamService:
    def __init__(self, db: Database) -> None:
        self.db = db
        # token hash -> (expiry on the monotonic clock, principal); see ``authenticate``.
        self._principals: dict[str, tuple[float, Principal]] = {}
        db.add_listener(KEYS_CHANNEL, self._principals.clear)

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

    async def create_key(
        self,
        team_id: str,
        name: str | None = None,
        mode: KeyMode = KeyMode.LIVE,
        permission: Permission = Permission.FULL_ACCESS,
        domain_id: str | None = None,
    ) -> CreatedKey:
        token = generate_token(mode)
        key = ApiKey(
            id=new_id(),
            team_id=team_id,
            name=(name or f"{mode.value} key")[:200],
            token_hint=token[:12],
            mode=mode,
            permission=permission,
            domain_id=domain_id,
            created_at=now_ms(),
            last_used_at=None,
            revoked_at=None,
        )
        async with self.db.transaction() as tx:
            await teams_repo.insert_key(tx, key, hash_token(token))
        return CreatedKey(key, token)

    async def list_keys(self, team_id: str) -> Sequence[ApiKey]:
        async with self.db.read() as tx:
            return await teams_repo.list_keys(tx, team_id)

    async def revoke_key(self, key_id: str, team_id: str | None = None) -> None:
        async with self.db.transaction() as tx:
            if not await teams_repo.revoke_key(tx, key_id, now_ms(), team_id):
                raise NotFound(f"No active API key with id {key_id!r}.")
            tx.notify(KEYS_CHANNEL)

    async def authenticate(self, token: str) -> Principal:
        """The caller of a live key. Valid keys are remembered for a few seconds: revoking a key
        or changing a team's limits clears every process's memory at commit (NOTIFY on
        PostgreSQL, in-process on SQLite), and the expiry bounds what a missed wake-up costs."""
        token_hash = hash_token(token)
        now = time.monotonic()
        cached = self._principals.get(token_hash)
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self.db.read() as tx:
            found = await teams_repo.find_active_key(tx, token_hash)
        if found is None:
            raise InvalidApiKey()
        key, team = found
        principal = Principal(team, key)
        if len(self._principals) >= PRINCIPAL_CACHE_SIZE:
            self._principals.clear()
        self._principals[token_hash] = (now + PRINCIPAL_CACHE_SECONDS, principal)
        return principal

    async def bootstrap(self) -> list[CreatedKey] | None:
        """On an empty database: team ``default`` with a live and a test key (else None)."""
        async with self.db.read() as tx:
            if await teams_repo.count_teams(tx):
                return None
        try:
            team = await self.create_team("default")
        except Conflict:
            return None  # another process bootstrapped at the same moment
        return [
            await self.create_key(team.id, "default live key", KeyMode.LIVE),
            await self.create_key(team.id, "default test key", KeyMode.TEST),
        ]


async def _create_default_streams(tx: Tx, team_id: str, now: int) -> None:
    for stream_id, name, kind in DEFAULT_STREAMS:
        await streams_repo.insert_stream(tx, Stream(stream_id, team_id, name, kind, now))


def _team_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned or len(cleaned) > 200 or any(ord(c) < 32 for c in cleaned):
        raise ValidationError("A team name must be 1-200 printable characters.")
    return cleaned


def _check_limits(rate_limit: int | None, daily_quota: int | None) -> None:
    for label, value in (("rate limit", rate_limit), ("daily quota", daily_quota)):
        if value is not None and value < 0:
            raise ValidationError(f"The {label} must be 0 (unlimited) or more.")
