"""Sending domains: create with a DKIM key, verify over DNS, re-check in the worker, claim.

DNS is looked up outside any transaction (no lock held while the network is slow); the result
is folded into the domain in a short transaction that re-reads it, writes the new statuses,
records ``domain.updated`` when something changed and schedules the next ``check_domain`` job.
The clock is injectable so the 72 h rule is tested without waiting.

What delivery asks of a sending domain (its settings, its DKIM key) is remembered per process
for a few seconds (``FACTS_SECONDS``), as the senders' answers are (``services/senders.py``):
every change that matters notifies ``DOMAINS_CHANNEL``, which clears them in every process.
When mail trickles in, each email is a batch of its own, and these reads were three of the
transactions it cost.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from posthaste.adapters.dkim_keys import KeyProviders
from posthaste.adapters.dns import DnsTemporaryFailure, Resolver
from posthaste.config import Settings
from posthaste.core import domains as rules
from posthaste.core.crypto import DKIM_KEY_PURPOSE, SecretBox
from posthaste.core.cursors import PageRequest
from posthaste.core.dkim import DkimKey
from posthaste.core.domain_requests import DomainChanges, NewDomain
from posthaste.core.domains import DnsRecord, Domain, RecordStatus
from posthaste.core.events import EventType
from posthaste.core.ids import new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Event, Job, Principal
from posthaste.core.pools import PoolChange, check_pool
from posthaste.core.serialize import domain_record
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.storage import domains as repo
from posthaste.storage import events as events_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import DOMAINS_CHANNEL, Database, Tx

CLAIM_PREFIX = "_posthaste-claim"
Clock = Callable[[], int]
Found = Sequence[str] | None
FACTS_SECONDS = 5.0
FACTS_SIZE = 10_000
V = TypeVar("V")


class Remembered(Generic[V]):
    """Answers kept for ``seconds``, all forgotten at once by ``forget``; an answer read while
    a ``forget`` happened is not kept (it may predate the change)."""

    def __init__(self, seconds: float = FACTS_SECONDS, size: int = FACTS_SIZE) -> None:
        self.seconds, self.size = seconds, size
        self._answers: dict[Hashable, tuple[float, V]] = {}
        self._generation = 0

    def forget(self) -> None:
        self._answers.clear()
        self._generation += 1

    async def get(self, key: Hashable, read: Callable[[], Awaitable[V]]) -> V:
        now = time.monotonic()
        found = self._answers.get(key)
        if found is not None and found[0] > now:
            return found[1]
        generation = self._generation
        answer = await read()
        if generation == self._generation:
            if len(self._answers) >= self.size:
                self._answers.clear()
            self._answers[key] = (now + self.seconds, answer)
        return answer


@dataclass(frozen=True)
class ClaimChallenge:
    """The TXT record that proves control of a name, and whether the claim is confirmed."""

    domain: Domain
    name: str
    value: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "object": "domain_claim",
            "domain_id": self.domain.id,
            "name": self.domain.name,
            "region": self.domain.region,
            "status": "claimed" if self.domain.claimed else "pending",
            "record": {"type": "TXT", "name": self.name, "value": self.value},
        }


class DomainService:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        resolver: Resolver,
        providers: KeyProviders | None = None,
        *,
        clock: Clock = now_ms,
    ) -> None:
        self.db = db
        self.settings = settings
        self.resolver = resolver
        self.providers = providers or KeyProviders()
        self.clock = clock
        self.box = SecretBox(settings.secret_keys, DKIM_KEY_PURPOSE)
        self._sending: Remembered[Domain | None] = Remembered()
        self._keys: Remembered[DkimKey | None] = Remembered()
        db.add_listener(DOMAINS_CHANNEL, self._forget)

    def _forget(self) -> None:
        self._sending.forget()
        self._keys.forget()

    def regions(self) -> list[dict[str, Any]]:
        default = self.settings.default_region
        return [{"name": name, "default": name == default} for name in self.settings.regions]

    async def create(self, principal: Principal, new: NewDomain) -> Domain:
        """Make the DKIM key with the region's provider, store, record the event."""
        check_pool(PoolChange(new.pool), self.settings.pools)
        async with self.db.read() as tx:
            if await repo.find_by_name(tx, principal.team_id, new.name) is not None:
                raise Conflict(f"This team already has the domain {new.name!r}; see GET /domains.")
        domain, encrypted = await self._provision(principal.team_id, new)
        async with self.db.transaction() as tx:
            await repo.insert_domain(tx, domain, encrypted)
            tx.notify(DOMAINS_CHANNEL)
            await _record(tx, domain, EventType.DOMAIN_CREATED, self.clock())
        return domain

    async def _provision(self, team_id: str, new: NewDomain) -> tuple[Domain, str | None]:
        options = new.settings
        provider = self.providers.for_region(new.region)
        selector = rules.new_selector()
        key = await provider.create_key(new.name, selector)
        records = rules.records_for(
            new.name,
            selector,
            key.public_key_b64,
            mx_host=self.settings.mx_host_for(new.region),
            spf_include=self.settings.spf_include_for(new.region),
            receiving=options.receiving,
        )
        if options.tracking_subdomain is not None:
            tracking = rules.tracking_record(
                new.name, options.tracking_subdomain, self._tracking_target()
            )
            records = (*records, tracking)
        domain = Domain(
            id=new_id(),
            team_id=team_id,
            name=new.name,
            region=new.region,
            status=RecordStatus.NOT_STARTED,
            records=records,
            dkim_selector=selector,
            key_provider=provider.name,
            open_tracking=options.open_tracking,
            click_tracking=options.click_tracking,
            tls=options.tls,
            receiving=options.receiving,
            created_at=self.clock(),
            pool=new.pool,
        )
        pem = key.private_key_pem
        return domain, None if pem is None else self.box.encrypt(pem)

    async def stream(self, principal: Principal) -> AsyncIterator[Domain]:
        """Every domain of the team, newest first, without holding them all in memory."""
        async with self.db.read() as tx:
            async for domain in repo.stream_domains(tx, principal.team_id):
                yield domain

    async def page(self, principal: Principal, request: PageRequest) -> tuple[list[Domain], bool]:
        """Resend's paging (newest first): the page and whether more lie beyond it."""
        async with self.db.read() as tx:
            page = await repo.page_domains(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your domains.")
        return page

    async def get(self, principal: Principal, domain_id: str) -> Domain:
        async with self.db.read() as tx:
            return await _get(tx, principal.team_id, domain_id)

    async def update(self, principal: Principal, domain_id: str, changes: DomainChanges) -> Domain:
        """Change tracking, TLS, receiving and the IP pool; turning receiving on adds its MX
        record, a tracking subdomain its CNAME (``not_started`` until the next verify)."""
        check_pool(changes.pool, self.settings.pools)
        async with self.db.transaction() as tx:
            domain = await _get(tx, principal.team_id, domain_id, for_update=True)
            options = changes.applied_to(rules.settings_of(domain))
            mx_host = self.settings.mx_host_for(domain.region)
            changed = replace(
                domain,
                open_tracking=options.open_tracking,
                click_tracking=options.click_tracking,
                tls=options.tls,
                receiving=options.receiving,
                records=rules.with_receiving(domain, options.receiving, mx_host)
                if options.receiving != domain.receiving
                else domain.records,
                pool=domain.pool if changes.pool is None else changes.pool.name,
            )
            if options.tracking_subdomain != rules.tracking_subdomain(domain):
                changed = replace(
                    changed,
                    records=rules.with_tracking(
                        changed, options.tracking_subdomain, self._tracking_target()
                    ),
                )
            if changed != domain:
                await repo.update_domain(tx, changed)
                tx.notify(DOMAINS_CHANNEL)
                await _record(tx, changed, EventType.DOMAIN_UPDATED, self.clock())
        return changed

    def _tracking_target(self) -> str:
        """Where a tracking subdomain's CNAME points: the host of the public URL."""
        return urlsplit(self.settings.public_url).hostname or ""

    async def delete(self, principal: Principal, domain_id: str) -> None:
        async with self.db.transaction() as tx:
            domain = await _get(tx, principal.team_id, domain_id, for_update=True)
            await repo.delete_domain(tx, principal.team_id, domain_id)
            tx.notify(DOMAINS_CHANNEL)
            await jobs_repo.drop(tx, JobKind.CHECK_DOMAIN, domain_id)
            await _record(tx, domain, EventType.DOMAIN_DELETED, self.clock())
        provider = self.providers.named(domain.key_provider)
        await provider.delete_key(domain.name, domain.dkim_selector)

    async def verify(self, principal: Principal, domain_id: str) -> Domain:
        """Look every record up now and store the outcome; DNS trouble is a status, not an error."""
        domain = await self.get(principal, domain_id)
        found = await self._look_up(domain.records)
        async with self.db.transaction() as tx:
            current = await _get(tx, principal.team_id, domain_id, for_update=True)
            return await self._store_check(tx, current, found, None)

    async def recheck(self, job: Job) -> None:
        """The ``check_domain`` job: re-check a pending, failing or verified domain."""
        async with self.db.read() as tx:
            domain = await repo.get_domain_any_team(tx, job.ref)
        found = await self._look_up(domain.records) if domain and _rechecked(domain) else {}
        async with self.db.transaction() as tx:
            current = await repo.get_domain_any_team(tx, job.ref, for_update=True)
            if current is None or not _rechecked(current):
                await jobs_repo.finish(tx, job)  # deleted, failed or never verified meanwhile
                return
            await self._store_check(tx, current, found, job)

    async def _look_up(self, records: Sequence[DnsRecord]) -> rules.Lookups:
        """The values at each record's name and type (None where DNS gave no answer)."""
        wanted = sorted({r.key for r in records})
        answers = await asyncio.gather(*(self._values(name, rtype) for name, rtype in wanted))
        return dict(zip(wanted, answers, strict=True))

    async def _values(self, name: str, rtype: str) -> Found:
        try:
            if rtype == "MX":
                hosts = await self.resolver.mx(name)
                return [host.host for host in hosts or []]
            if rtype == "CNAME":
                return await self.resolver.cname(name)
            return await self.resolver.txt(name)
        except DnsTemporaryFailure:
            return None

    async def _store_check(
        self, tx: Tx, domain: Domain, found: rules.Lookups, job: Job | None
    ) -> Domain:
        now = self.clock()
        result = rules.apply_check(domain, found, now)
        checked = replace(
            domain,
            status=result.status,
            records=result.records,
            verified_at=result.verified_at,
            checking_since=result.checking_since,
            last_checked_at=now,
        )
        await repo.update_domain(tx, checked)
        changed = (checked.status, checked.records) != (domain.status, domain.records)
        # What the senders' answers and delivery's remembered domains depend on (a verified
        # tracking CNAME moves the links to the domain's own host).
        if changed or checked.verified_at != domain.verified_at:
            tx.notify(DOMAINS_CHANNEL)
        if changed:
            await _record(tx, checked, EventType.DOMAIN_UPDATED, now)
        await self._schedule(tx, checked, rules.next_check_in(result, now), job, now)
        return checked

    async def _schedule(
        self, tx: Tx, domain: Domain, delay: int | None, job: Job | None, now: int
    ) -> None:
        """One pending ``check_domain`` job per domain: the worker's own, else a fresh one."""
        if job is not None:
            if delay is None:
                await jobs_repo.finish(tx, job)
            else:
                await jobs_repo.retry_at(tx, job, now + delay)
            return
        await jobs_repo.drop(tx, JobKind.CHECK_DOMAIN, domain.id)
        if delay is not None:
            await jobs_repo.enqueue(
                tx, JobKind.CHECK_DOMAIN, domain.id, domain.team_id, now + delay, now
            )

    async def claim(self, principal: Principal, domain_id: str) -> ClaimChallenge:
        """The TXT challenge of the domain's name (the same token until the domain is deleted)."""
        async with self.db.transaction() as tx:
            domain = await _get(tx, principal.team_id, domain_id, for_update=True)
            if domain.claim_token is None:
                domain = replace(domain, claim_token=secrets.token_hex(16))
                await repo.update_domain(tx, domain)
        return _challenge(domain)

    async def claim_name(self, principal: Principal, new: NewDomain) -> ClaimChallenge:
        """Resend's ``POST /domains/claim {name}``: the claim of the team's domain of that name,
        added first (with ``new``'s region and settings) when the team does not have it yet."""
        check_pool(PoolChange(new.pool), self.settings.pools)
        async with self.db.read() as tx:
            domain = await repo.find_by_name(tx, principal.team_id, new.name)
        if domain is None:
            try:
                domain = await self.create(principal, new)
            except Conflict:  # added meanwhile by a concurrent request
                async with self.db.read() as tx:
                    domain = await repo.find_by_name(tx, principal.team_id, new.name)
                if domain is None:
                    raise
        return await self.claim(principal, domain.id)

    async def claim_state(self, principal: Principal, domain_id: str) -> ClaimChallenge:
        """The domain's claim as it stands; 404 when no claim was started."""
        domain = await self.get(principal, domain_id)
        if domain.claim_token is None:
            raise NotFound(
                f"No claim was started for domain {domain_id!r}; "
                "POST /domains/{id}/claim starts one."
            )
        return _challenge(domain)

    async def confirm_claim(self, principal: Principal, domain_id: str) -> Domain:
        """Check the challenge over DNS; on success the name is this team's alone."""
        domain = await self.get(principal, domain_id)
        if domain.claim_token is None:
            raise Conflict("No claim was started; call POST /domains/{id}/claim first.")
        challenge = _challenge(domain)
        await self._check_challenge(challenge)
        async with self.db.transaction() as tx:
            domain = await _get(tx, principal.team_id, domain_id, for_update=True)
            previous = await repo.claimant_domain(tx, domain.name)
            await repo.set_claim(tx, domain, self.clock())
            tx.notify(DOMAINS_CHANNEL)
            claimed = await _get(tx, principal.team_id, domain_id)
            if not domain.claimed:
                await _record(tx, claimed, EventType.DOMAIN_UPDATED, self.clock())
            if previous is not None and previous != domain.id:
                await self._record_claim_lost(tx, previous)
        return claimed

    async def _check_challenge(self, challenge: ClaimChallenge) -> None:
        try:
            values = await self.resolver.txt(challenge.name)
        except DnsTemporaryFailure as exc:
            raise ValidationError(
                f"The claim record at {challenge.name} could not be looked up now ({exc}); "
                "try again in a minute."
            ) from exc
        if challenge.value not in values:
            raise ValidationError(
                f"The claim record was not found: publish a TXT record at {challenge.name} "
                f"with the value {challenge.value!r}, then confirm again."
            )

    async def _record_claim_lost(self, tx: Tx, domain_id: str) -> None:
        lost = await repo.get_domain_any_team(tx, domain_id)
        if lost is not None:
            await _record(tx, lost, EventType.DOMAIN_UPDATED, self.clock())

    async def release_claim(self, principal: Principal, domain_id: str) -> Domain:
        async with self.db.transaction() as tx:
            domain = await _get(tx, principal.team_id, domain_id, for_update=True)
            if not await repo.release_claim(tx, domain):
                raise Conflict(f"This team holds no claim on {domain.name!r}.")
            tx.notify(DOMAINS_CHANNEL)
            released = await _get(tx, principal.team_id, domain_id)
            await _record(tx, released, EventType.DOMAIN_UPDATED, self.clock())
        return released

    async def sending_domain(self, team_id: str, name: str) -> Domain | None:
        """The team's domain of that name, for delivery and tracking (``tls``, tracking flags);
        remembered for a few seconds (see the module's docstring)."""
        key = (team_id, name.lower())
        return await self._sending.get(key, lambda: self._sending_domain(*key))

    async def _sending_domain(self, team_id: str, name: str) -> Domain | None:
        async with self.db.read() as tx:
            return await repo.find_by_name(tx, team_id, name)

    async def signing_key(self, team_id: str, domain: str) -> DkimKey | None:
        """The key of the team's verified domain of that name (``core.dkim.SigningKeys``);
        remembered for a few seconds (see the module's docstring)."""
        key = (team_id, domain.lower())
        return await self._keys.get(key, lambda: self._signing_key(*key))

    async def _signing_key(self, team_id: str, domain: str) -> DkimKey | None:
        async with self.db.read() as tx:
            found = await repo.private_key_of(tx, team_id, domain.lower())
        if found is None:
            return None
        stored, encrypted = found
        if not stored.usable or encrypted is None:
            return None
        pem = self.box.decrypt(encrypted)
        return DkimKey(stored.name, stored.dkim_selector, pem)


def _rechecked(domain: Domain) -> bool:
    """The worker re-checks domains being verified, failing, or verified; never failed ones."""
    return domain.status not in (RecordStatus.FAILED, RecordStatus.NOT_STARTED)


def _challenge(domain: Domain) -> ClaimChallenge:
    assert domain.claim_token is not None
    return ClaimChallenge(
        domain, f"{CLAIM_PREFIX}.{domain.name}", f"posthaste-claim={domain.claim_token}"
    )


async def _get(tx: Tx, team_id: str, domain_id: str, *, for_update: bool = False) -> Domain:
    domain = await repo.get_domain(tx, team_id, domain_id, for_update=for_update)
    if domain is None:
        raise NotFound(f"Domain {domain_id!r} was not found; see GET /domains.")
    return domain


async def _record(tx: Tx, domain: Domain, kind: EventType, now: int) -> None:
    event = Event(new_id(), domain.team_id, kind, None, now, domain_record(domain))
    await events_repo.insert_events(tx, [event])
