"""The baseline: the rows of accepted emails inserted straight into the database.

The same write as ``services.sending`` makes for accepted emails (``emails.store_accepted``:
the emails with their recipients, tags and subjects, first events and jobs), the same
``Database`` (SQLAlchemy async engine, pool, SQLite write lock and ``BEGIN IMMEDIATE``,
PostgreSQL ``pg_notify`` in the statement) and ``Database.autocommit()`` as a group of
accepted emails without a quota or an idempotency key is written -- but without HTTP,
authentication, parsing and the pre-insert checks.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from bench import cpu, payload
from bench.stats import Measurement, Recorder
from posthaste.core.ids import new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.mime import make_message_id
from posthaste.core.models import Email, Event, KeyMode, NewEmail, NewJob
from posthaste.core.send_request import SendRequest, parse_send_request
from posthaste.core.serialize import email_event_data
from posthaste.core.status import EmailStatus
from posthaste.services.api_keys import ApiKeyService
from posthaste.services.teams import TeamService
from posthaste.storage import emails as emails_repo
from posthaste.storage.database import Database
from posthaste.storage.dialects import dialect_for
from posthaste.storage.migrate import upgrade_to_head


def _email(request: SendRequest, team_id: str, now: int) -> Email:
    """The email ``services.sending._build_email`` makes for a test key and inline content."""
    email_id = new_id()
    return Email(
        id=email_id,
        team_id=team_id,
        mode=KeyMode.TEST,
        from_address=request.from_.formatted(),
        to=[a.formatted() for a in request.to],
        cc=[a.formatted() for a in request.cc],
        bcc=[a.formatted() for a in request.bcc],
        reply_to=[a.formatted() for a in request.reply_to],
        subject=request.subject or "",
        html=request.html,
        text=request.text,
        headers=request.headers,
        tags=request.tags,
        status=EmailStatus.QUEUED,
        last_event="email.queued",
        created_at=now,
        scheduled_at=None,
        sent_at=None,
        template_id=None,
        stream_id="transactional",
        broadcast_id=None,
        message_id=make_message_id(request.from_.domain, email_id),
        provider_message_id=None,
        region="us-east-1",
    )


def build_accepted(
    requests: list[SendRequest], team_id: str
) -> tuple[list[NewEmail], list[Event], list[NewJob], int]:
    """What the send path stores for ``requests``, fresh ids each time."""
    now = now_ms()
    accepted: list[NewEmail] = []
    events: list[Event] = []
    jobs: list[NewJob] = []
    for request in requests:
        email = _email(request, team_id, now)
        accepted.append(NewEmail(email, request.from_.lookup_key, request.recipients(), [], None))
        data = email_event_data(email)
        events.append(Event(new_id(), team_id, email.last_event, email.id, now, data))
        jobs.append(NewJob(JobKind.DELIVER_EMAIL, email.id, team_id, now))
    return accepted, events, jobs, now


@dataclass
class RawTarget:
    db: Database
    team_id: str
    requests: list[SendRequest]


async def _writer(
    target: RawTarget,
    per_tx: int,
    window: tuple[float, float],
    recorder: Recorder,
    offset: int,
) -> None:
    window_start, window_end = window
    pool = target.requests
    index = offset
    while time.perf_counter() < window_end:
        chosen = [pool[(index + i) % len(pool)] for i in range(per_tx)]
        index += per_tx
        accepted, events, jobs, now = build_accepted(chosen, target.team_id)
        start = time.perf_counter()
        async with target.db.autocommit() as tx:
            await emails_repo.store_accepted(tx, accepted, events, jobs, now)
        if start >= window_start:
            recorder.add(start, time.perf_counter(), per_tx)


async def _insert_for(
    target: RawTarget, name: str, per_tx: int, concurrency: int, duration: float, warmup: float
) -> Measurement:
    recorder = Recorder()
    window_start = time.perf_counter() + warmup
    window = (window_start, window_start + duration)
    usage = asyncio.create_task(cpu.during({"bench": [os.getpid()]}, *window))
    await asyncio.gather(
        *(_writer(target, per_tx, window, recorder, i * 7919) for i in range(concurrency))
    )
    result = Measurement.of(
        name,
        "raw",
        recorder,
        concurrency=concurrency,
        emails_per_request=per_tx,
        window_start=window_start,
    )
    result.cpu = await usage
    return result


async def run(
    async_url: str,
    *,
    duration: float,
    warmup: float,
    single_concurrency: int,
    batch_size: int,
    batch_concurrency: int,
) -> list[Measurement]:
    """Both baselines on a fresh migrated database: one email per transaction, then batches."""
    dialect = dialect_for(async_url)
    await upgrade_to_head(async_url, dialect)
    db = Database(async_url, dialect)
    try:
        team = await TeamService(db, ApiKeyService(db)).create_team("bench", 0, 0)
        now = now_ms()
        requests = [parse_send_request(payload.email(i), now) for i in range(payload.POOL_SIZE)]
        target = RawTarget(db, team.id, requests)
        single = await _insert_for(
            target,
            f"raw insert, 1 email/write, {single_concurrency} writers",
            1,
            single_concurrency,
            duration,
            warmup,
        )
        batch = await _insert_for(
            target,
            f"raw insert, {batch_size} emails/write, {batch_concurrency} writers",
            batch_size,
            batch_concurrency,
            duration,
            warmup,
        )
        return [single, batch]
    finally:
        await db.close()
