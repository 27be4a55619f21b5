"""API keys: created (the token shown once), listed, revoked, and authenticated on every request
and every relay message."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import string
import time
from collections.abc import Sequence
from dataclasses import dataclass

from posthaste.core.api_keys import NewApiKey
from posthaste.core.cursors import PageRequest
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import ApiKey, KeyMode, Principal
from posthaste.errors import InvalidApiKey, NotFound, ValidationError
from posthaste.storage import api_keys as api_keys_repo
from posthaste.storage import domains as domains_repo
from posthaste.storage.database import KEYS_CHANNEL, Database

_BASE62 = string.ascii_letters + string.digits
PRINCIPAL_CACHE_SECONDS = 5.0
PRINCIPAL_CACHE_SIZE = 10_000


def generate_token(mode: KeyMode) -> str:
    """``ph_live_`` or ``ph_test_`` followed by 32 base62 characters (~190 bits)."""
    return f"ph_{mode.value}_" + "".join(secrets.choice(_BASE62) for _ in range(32))


def hash_token(token: str) -> str:
    """Keys are stored as SHA-256 only: they are high-entropy, so no slow hash is needed."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedKey:
    """A key just created, with its token: the only time the token is known."""

    key: ApiKey
    token: str


class ApiKeyService:
    """A team's API keys, and the callers they identify (remembered for a few seconds)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # token hash -> (expiry on the monotonic clock, principal); see ``authenticate``.
        self._principals: dict[str, tuple[float, Principal]] = {}
        # token hash -> its lookup in flight, which every request of that key meanwhile awaits.
        self._lookups: dict[str, asyncio.Task[Principal]] = {}
        self._forgotten = 0  # how many times the remembered keys were forgotten
        db.add_listener(KEYS_CHANNEL, self._forget)

    def _forget(self) -> None:
        self._principals.clear()
        self._lookups.clear()  # a request from now on reads the key afresh
        self._forgotten += 1

    async def create(self, team_id: str, new: NewApiKey) -> CreatedKey:
        """Store a key for the team; a ``domain_id`` must name one of the team's own domains."""
        token = generate_token(new.mode)
        key = ApiKey(
            id=new_id(),
            team_id=team_id,
            name=new.name,
            token_hint=token[:12],
            mode=new.mode,
            permission=new.permission,
            domain_id=new.domain_id,
            created_at=now_ms(),
            last_used_at=None,
            revoked_at=None,
        )
        async with self.db.transaction() as tx:
            domain_id = new.domain_id
            if domain_id is not None and not await domains_repo.get_domain(tx, team_id, domain_id):
                raise ValidationError(f"Domain {domain_id!r} was not found; see GET /domains.")
            await api_keys_repo.insert_key(tx, key, hash_token(token))
        return CreatedKey(key, token)

    async def all(self, team_id: str) -> Sequence[ApiKey]:
        """The team's keys that still work, oldest first (never their tokens)."""
        async with self.db.read() as tx:
            return await api_keys_repo.list_keys(tx, team_id)

    async def page(self, team_id: str, request: PageRequest) -> tuple[list[ApiKey], bool]:
        """Resend's paging (oldest first): the page and whether more lie beyond it."""
        async with self.db.read() as tx:
            page = await api_keys_repo.page_keys(
                tx, team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your API keys.")
        return page

    async def rename(self, team_id: str, key_id: str, name: str) -> ApiKey:
        """Give one of the team's working keys a new name (nothing else about a key changes)."""
        async with self.db.transaction() as tx:
            key = await api_keys_repo.rename_key(tx, team_id, key_id, name)
        if key is None:
            raise NotFound(f"No active API key with id {key_id!r}.")
        return key

    async def revoke(self, key_id: str, team_id: str | None = None) -> None:
        """Revoke a key of ``team_id`` (any team's: the operator's CLI); every process forgets
        it at commit."""
        async with self.db.transaction() as tx:
            if not await api_keys_repo.revoke_key(tx, key_id, now_ms(), team_id):
                raise NotFound(f"No active API key with id {key_id!r}.")
            tx.notify(KEYS_CHANNEL)

    async def authenticate(self, token: str) -> Principal:
        """The caller of a live key. Valid keys are remembered for a few seconds: revoking a key
        or changing a team's limits clears every process's memory at commit (NOTIFY on
        PostgreSQL, in-process on SQLite), and the expiry bounds what a missed wake-up costs."""
        token_hash = hash_token(token)
        cached = self._principals.get(token_hash)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        # One lookup per key at a time: when a key's memory expires under load, the requests
        # that arrive before its lookup ends wait for it, rather than each reading the key on a
        # connection of its own (under a burst, dozens: each a pooled connection taken or
        # opened). Shielded: a request that goes away does not cancel the others' lookup.
        lookup = self._lookups.get(token_hash)
        if lookup is None:
            lookup = asyncio.create_task(self._look_up(token_hash), name="api-key-lookup")
            self._lookups[token_hash] = lookup
            lookup.add_done_callback(lambda done: self._looked_up(token_hash, done))
        return await asyncio.shield(lookup)

    def _looked_up(self, token_hash: str, lookup: asyncio.Task[Principal]) -> None:
        if self._lookups.get(token_hash) is lookup:
            del self._lookups[token_hash]
        if not lookup.cancelled():
            lookup.exception()  # retrieved here too: every request awaiting it may have gone

    async def _look_up(self, token_hash: str) -> Principal:
        """The key's caller read from the database, remembered unless the remembered keys were
        forgotten meanwhile (a revocation may have committed after this read)."""
        forgotten, started = self._forgotten, time.monotonic()
        async with self.db.read() as tx:
            found = await api_keys_repo.find_active_key(tx, token_hash)
        if found is None:
            raise InvalidApiKey()
        key, team = found
        principal = Principal(team, key)
        if forgotten != self._forgotten:
            return principal
        if len(self._principals) >= PRINCIPAL_CACHE_SIZE:
            self._principals.clear()
        self._principals[token_hash] = (started + PRINCIPAL_CACHE_SECONDS, principal)
        return principal
