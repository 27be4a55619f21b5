"""The webhook dispatcher: claims due deliveries and posts them, each endpoint in its own lane.

Not the generic job runner, whose batches wait for their slowest job: here every delivery runs
on its own. Each endpoint has a lane: its claimed deliveries wait in order and at most
``per_endpoint`` runners (tasks) post them, each taking the next as soon as its request is
answered; at most ``CLAIM_ROUNDS`` times that many are claimed (claims never take more, so a slow
or dead endpoint's backlog never stands in front of another endpoint's deliveries). Finished
attempts are written in groups (one statement for all that finished meanwhile, at most one group
per ``flush_interval``). Woken by the database when deliveries fall due (LISTEN/NOTIFY on
PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from posthaste.adapters.webhook_http import HttpResult, WebhookClient
from posthaste.core.crypto import DecryptionError, SecretBox
from posthaste.core.ids import new_id, now_ms
from posthaste.core.webhooks import (
    DeliveryStatus,
    WebhookAttempt,
    envelope_bytes,
    request_headers,
    retry_delay,
    sign,
    signing_key,
)
from posthaste.services.metrics import Metrics, webhook_outcome
from posthaste.storage import webhook_queue as repo
from posthaste.storage.database import Database
from posthaste.storage.webhook_endpoints import Target

log = logging.getLogger(__name__)
CLAIM_ROUNDS = 4  # an endpoint's claimed deliveries, in rounds of ``per_endpoint`` requests


@dataclass(frozen=True)
class DispatchPolicy:
    """Retry schedule (seconds), jitter, the claim lease and the concurrency bounds."""

    schedule: tuple[float, ...]
    jitter: float
    lease_ms: int
    per_endpoint: int = 32
    capacity: int = 1024
    claim_batch: int = 256
    drain_seconds: float = 5.0  # at stop, how long in-flight attempts may finish
    # After a group commit, how long the next group gathers before it is written: each commit
    # costs the database a round trip, a plan and a WAL flush, whatever its size.
    flush_interval: float = 0.02
    idle_check: float = 30.0  # with nothing due, how often to look again anyway

    @property
    def claimable(self) -> int:
        """Deliveries of one endpoint held at once: in flight plus three rounds waiting their turn
        (the next claim's transaction then never leaves the endpoint idle)."""
        return CLAIM_ROUNDS * self.per_endpoint


@dataclass(frozen=True)
class _Work:
    claimed: repo.Claimed
    url: str
    body: bytes
    keys: tuple[bytes, ...]


@dataclass
class _Lane:
    """One endpoint's claimed deliveries waiting their turn, and how many runners post them."""

    waiting: deque[_Work] = field(default_factory=deque)
    runners: int = 0


class WebhookDispatcher:
    def __init__(
        self,
        db: Database,
        client: WebhookClient,
        box: SecretBox,
        policy: DispatchPolicy,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.metrics = metrics or Metrics()
        self.client = client
        self.box = box
        self.policy = policy
        self.attempted = 0
        self.claim_rounds = 0  # claim transactions that took something (for bench/metrics)
        self.flush_rounds = 0  # group-commits of finished attempts
        self._in_flight: Counter[str] = Counter()  # claimed and not yet finished, by endpoint
        self._held = 0  # claimed and not yet finished, all endpoints
        self._lanes: dict[str, _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # the lanes' runners
        self._finished: list[repo.Outcome] = []
        self._wake = asyncio.Event()
        self._flush_wake = asyncio.Event()
        self._stopping = False
        self._drained = asyncio.Event()  # every attempt finished or cancelled: the last flush
        self._rng = random.Random()
        db.add_listener(repo.CHANNEL, self._wake.set)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Claim and post until ``stop()``, then let in-flight attempts finish and be written."""
        flusher = asyncio.create_task(self._flush_loop())
        try:
            while not self._stopping:
                self._wake.clear()
                free = self.policy.capacity - self._held
                taken = await self._dispatch_due(free) if free > 0 else 0
                if taken >= min(free, 16) > 0:
                    continue  # a full claim: more may be waiting
                await self._sleep()
        finally:
            await self._drain()
            await flusher

    async def _drain(self) -> None:
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=self.policy.drain_seconds)
            for task in pending:
                task.cancel()  # its delivery falls due again when the lease runs out
        self._drained.set()
        self._flush_wake.set()

    async def _dispatch_due(self, free: int) -> int:
        """Claim what fits and start it; the number of deliveries claimed."""
        try:
            work, paused = await self._claim(free)
        except Exception:
            log.exception("claiming webhook deliveries failed; retrying shortly")
            await asyncio.sleep(1)
            return 0
        for item in work:
            self._start(item)
        self.claim_rounds += 1 if work or paused else 0
        return len(work) + paused

    async def _claim(self, free: int) -> tuple[list[_Work], int]:
        room = {
            webhook_id: self.policy.claimable - count
            for webhook_id, count in self._in_flight.items()
        }
        now = now_ms()
        claims = await repo.claim_due(
            self.db,
            now,
            self.policy.lease_ms,
            room,
            self.policy.claimable,
            min(free, self.policy.claim_batch),
        )
        work, idle = self._prepare(claims, now)
        if idle:  # a disabled or deleted endpoint, or an event no longer there
            try:
                async with self.db.transaction() as tx:
                    await repo.pause(tx, idle)
            except Exception:
                # The claim is committed: post what it took; these fall due after the lease.
                log.exception("pausing %d webhook deliveries failed", len(idle))
        return work, len(idle)

    def _prepare(
        self, claims: Sequence[repo.Claim], now: int
    ) -> tuple[list[_Work], list[repo.Claimed]]:
        work: list[_Work] = []
        idle: list[repo.Claimed] = []
        keys: dict[str, tuple[bytes, ...]] = {}
        for claim in claims:
            target, event = claim.target, claim.event
            if target is None or event is None or not target.enabled:
                idle.append(claim.delivery)
                continue
            if target.id not in keys:
                keys[target.id] = self._keys(target, now)
            body = envelope_bytes(event.type, event.created_at, event.data)
            work.append(_Work(claim.delivery, target.endpoint, body, keys[target.id]))
        return work, idle

    def _keys(self, target: Target, now: int) -> tuple[bytes, ...]:
        sealed = [target.secret]
        if target.previous_secret and (target.previous_secret_until or 0) > now:
            sealed.append(target.previous_secret)
        try:
            return tuple(signing_key(self.box.decrypt(s).decode()) for s in sealed)
        except DecryptionError:
            log.error("webhook %s: its secret does not decrypt with this secret key", target.id)
            return ()

    def _start(self, work: _Work) -> None:
        webhook_id = work.claimed.webhook_id
        self._in_flight[webhook_id] += 1
        self._held += 1
        lane = self._lanes.get(webhook_id)
        if lane is None:
            lane = self._lanes[webhook_id] = _Lane()
        lane.waiting.append(work)
        if lane.runners < self.policy.per_endpoint:
            lane.runners += 1
            task = asyncio.create_task(self._run(lane))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, lane: _Lane) -> None:
        """A runner: posts the lane's next delivery until none waits."""
        try:
            while lane.waiting:
                await self._attempt(lane.waiting.popleft())
        finally:
            lane.runners -= 1

    async def _attempt(self, work: _Work) -> None:
        claimed = work.claimed
        try:
            started = now_ms()
            result = await self._post(work, started)
            self._finished.append(self._outcome(claimed, result, started))
            self.attempted += 1
            self.metrics.webhook_attempt(webhook_outcome(result.success, result.status_code))
        except Exception:
            log.exception("webhook attempt %s/%s crashed", claimed.webhook_id, claimed.event_id)
        finally:
            self._flush_wake.set()
            self._release(claimed.webhook_id)

    def _release(self, webhook_id: str) -> None:
        """One fewer held for the endpoint; wake the claimer when claiming more is worth it."""
        self._held -= 1
        left = self._in_flight[webhook_id] - 1
        self._in_flight[webhook_id] = left
        if left <= 0:
            del self._in_flight[webhook_id]
            self._lanes.pop(webhook_id, None)  # empty: its last runner is returning
        # Claim again once the endpoint's waiting half has drained (not after every attempt),
        # or once half the process's capacity is free.
        half = self.policy.claimable // 2
        if left in (0, half) or self._held == self.policy.capacity // 2:
            self._wake.set()

    async def _post(self, work: _Work, started: int) -> HttpResult:
        if not work.keys:
            return HttpResult(None, False, "the signing secret cannot be decrypted", 0, None)
        timestamp = started // 1000
        signature = sign(work.claimed.event_id, timestamp, work.body, work.keys)
        headers = request_headers(work.claimed.event_id, timestamp, signature)
        return await self.client.post(work.url, work.body, headers)

    def _outcome(self, claimed: repo.Claimed, result: HttpResult, started: int) -> repo.Outcome:
        attempt = WebhookAttempt(
            new_id(),
            claimed.webhook_id,
            claimed.event_id,
            started,
            result.status_code,
            result.success,
            result.error,
            result.duration_ms,
            result.response_body,
        )
        if result.success:
            return repo.Outcome(claimed, attempt, DeliveryStatus.DELIVERED, None)
        if claimed.replay_status is not None:  # a replay is one attempt
            return repo.Outcome(claimed, attempt, DeliveryStatus(claimed.replay_status), None)
        delay = retry_delay(
            claimed.attempts + 1, self.policy.schedule, self.policy.jitter, self._rng
        )
        if delay is None:
            return repo.Outcome(claimed, attempt, DeliveryStatus.FAILED, None)
        next_at = now_ms() + int(delay * 1000)
        return repo.Outcome(claimed, attempt, DeliveryStatus.PENDING, next_at)

    async def _flush_loop(self) -> None:
        """Write finished attempts in groups until the drain at stop is over, then the last."""
        while True:
            await self._flush_wake.wait()
            self._flush_wake.clear()
            await self._flush()
            if self._drained.is_set():
                await self._flush()  # whatever finished while the last group was written
                return
            with contextlib.suppress(TimeoutError):  # let the next group gather
                async with asyncio.timeout(self.policy.flush_interval):
                    await self._drained.wait()

    async def _flush(self) -> None:
        batch, self._finished = self._finished, []
        if not batch:
            return
        try:
            self.flush_rounds += 1
            await repo.record_outcomes(self.db, batch)
        except Exception:
            # The deliveries stay leased and fall due again when the lease runs out.
            log.exception("recording %d webhook attempts failed", len(batch))

    async def _sleep(self) -> None:
        """Until woken, or until the next delivery falls due."""
        timeout: float = self.policy.idle_check
        if self._held < self.policy.capacity:
            now = now_ms()
            due = await self._next_due(now)
            if due.now and not self._saturated():
                # Due, yet this claim did not get it: another dispatcher's claim holds it.
                timeout = 0.05
            elif due.later is not None:
                timeout = min(timeout, (due.later - now) / 1000)
        # A saturated endpoint's deliveries due now are claimed when its lane drains (the
        # wake in ``_release``), not on a timer.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _saturated(self) -> bool:
        return any(count >= self.policy.claimable for count in self._in_flight.values())

    async def _next_due(self, now: int) -> repo.Due:
        try:
            async with self.db.read() as tx:
                return await repo.next_due(tx, now)
        except Exception:
            log.exception("reading the next due webhook delivery failed")
            return repo.Due(False, None)
