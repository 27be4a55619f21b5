"""Broadcasts: drafts edited freely, then sent (now or at ``scheduled_at``) to every member of a
segment by a durable ``expand_broadcast`` job.

Expansion reads the segment in contact id order, ``chunk_size`` members at a time, and renders
their emails outside any write (``read_chunk``: no write lock held while rendering). Storing a
chunk is one transaction (``store_chunk``): the members' emails are accepted through the send
path (``SendingService.accept_in``: the same checks, suppression and daily quota as every email)
and then, holding the broadcast's row, the cursor and counts move with them, so a worker killed
at any point resumes after the last committed chunk and mails no one twice. A chunk that does
not begin at the cursor when it gets the row (another worker stored it) or that was read before
a cancel committed stores nothing: its emails roll back. A cancel takes the same row lock, so
members not yet accepted when it commits are never mailed.

On PostgreSQL several chunks of one job are stored at once (``CHUNKS_IN_FLIGHT``), each in its
own transaction: while the database stores one, the worker reads and renders the next. Each
takes the row only once the chunk before it has committed (or stored nothing, and then it
stores nothing either), so the cursor moves in order.

A run of the job (at most ``run_seconds``) checks the broadcast's sender and content once, at its
first chunk, and reuses them for the chunks after (``_Run``): a domain, template or stream that
goes away is noticed at the next run, within seconds. No chunk is read once the run is over.

When the daily quota runs out mid-way, the broadcast pauses (``resumes_at``: the next 00:00 UTC)
with the members not yet mailed still ahead of its cursor; a cancel stops it for good. When its
content can no longer be sent (its domain, template, stream, topic or segment went away or lost
its standing), it ends ``failed`` with ``error``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from posthaste.core.addresses import Address, parse_address, parse_address_list
from posthaste.core.broadcasts import (
    UNDER_WAY,
    Broadcast,
    BroadcastContent,
    BroadcastStatus,
    Member,
    MemberContent,
    SendOrder,
    Skip,
    check_complete,
    next_utc_day,
    parse_broadcast,
    skip_reason,
    tally_chunk,
)
from posthaste.core.contacts import Contact
from posthaste.core.cursors import PageRequest
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job, Origin, Principal, Sender
from posthaste.core.send_request import SendRequest
from posthaste.core.unsubscribe import UnsubscribeLinks
from posthaste.errors import Conflict, NotFound, PosthasteError, ValidationError
from posthaste.services.sending import Outcome, SenderPolicy, SendingService
from posthaste.services.template_content import ContentSource, TemplateContent, subject_of
from posthaste.storage import api_keys as keys_repo
from posthaste.storage import broadcasts as repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import segments as segments_repo
from posthaste.storage import streams as streams_repo
from posthaste.storage import teams as teams_repo
from posthaste.storage import templates as templates_repo
from posthaste.storage import topics as topics_repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.dialects import Forms

CHUNK_SIZE = 1000
RUN_SECONDS = 2.0  # a job hands its broadcast back to the queue after this long (fair, stoppable)
# Chunks stored at once by one job: on PostgreSQL the database stores one while the worker
# reads and renders the next (bench/README.md, Broadcasts); SQLite has one writer at a time.
CHUNKS_IN_FLIGHT = Forms(postgresql=3, sqlite=1)
SAMPLE_CONTACT_ID = "00000000-0000-7000-8000-000000000000"


class Step(Enum):
    """What storing a chunk did."""

    NEXT = "stored; more members may follow"
    STALE = "stored nothing: the cursor is not where the chunk begins; read again"
    DONE = "the job is over: finished, paused or stopped in the same transaction"


@dataclass(frozen=True)
class Chunk:
    """The members after ``after``, and their emails (or why each could not be made), ready
    to store; or why the broadcast cannot be sent any more."""

    read: Broadcast
    after: str | None  # the cursor the members follow
    sender: Sender
    plan: list[tuple[Member, Skip | None]]
    requests: list[SendRequest | PosthasteError]
    failure: PosthasteError | None = None


@dataclass(frozen=True)
class _Sendable:
    """A broadcast's content checked, parsed and compiled, ready to render per member."""

    source: ContentSource
    content: MemberContent
    from_: Address
    reply_to: list[Address]
    topic_default: str | None


@dataclass
class _Run:
    """What one run of the job checked at its first chunk: who sends, and the content."""

    checked: tuple[Sender, _Sendable] | None = None


class BroadcastService:
    def __init__(
        self,
        db: Database,
        sending: SendingService,
        content: TemplateContent,
        senders: SenderPolicy,
        links: UnsubscribeLinks,
        *,
        chunk_size: int = CHUNK_SIZE,
        run_seconds: float = RUN_SECONDS,
        in_flight: int | None = None,
    ) -> None:
        self.db = db
        self.sending = sending
        self.content = content
        self.senders = senders
        self.links = links
        self.chunk_size = chunk_size
        self.run_seconds = run_seconds
        self.in_flight = in_flight or db.dialect.pick(CHUNKS_IN_FLIGHT)

    async def create(
        self, principal: Principal, content: BroadcastContent, order: SendOrder | None
    ) -> Broadcast:
        """A draft, checked against the team's segments, topics, streams, templates and
        domains; with ``order``, sent at once (or scheduled)."""
        now = now_ms()
        draft = Broadcast(
            new_id(), principal.team_id, principal.key.id, content, BroadcastStatus.DRAFT,
            now, now,
        )  # fmt: skip
        async with self.db.transaction() as tx:
            await self._check_references(tx, principal.sender, content)
            if order is not None:
                draft = await self._started(tx, principal.sender, draft, order, now)
            await repo.insert_broadcast(tx, draft)
        return draft

    async def update(
        self, principal: Principal, broadcast_id: str, fields: Mapping[str, Any]
    ) -> Broadcast:
        """Apply ``PATCH``'s fields to a draft (checked as on create)."""
        async with self.db.transaction() as tx:
            current = await self._draft(tx, principal, broadcast_id, "edited")
            content = parse_broadcast(fields, now_ms(), current.content)
            await self._check_references(tx, principal.sender, content)
            updated = replace(
                current, content=content, updated_at=max(now_ms(), current.updated_at)
            )
            await repo.update_broadcast(tx, updated)
        return updated

    async def delete(self, principal: Principal, broadcast_id: str) -> Broadcast:
        async with self.db.transaction() as tx:
            current = await self._draft(tx, principal, broadcast_id, "deleted")
            await repo.delete_broadcast(tx, principal.team_id, current.id)
        return current

    async def send(self, principal: Principal, broadcast_id: str, order: SendOrder) -> Broadcast:
        """Send a draft now, or schedule it; the key sending it decides its mode (test keys'
        broadcasts stay on the machine) and its domain restriction."""
        async with self.db.transaction() as tx:
            current = await self._draft(tx, principal, broadcast_id, "sent")
            current = replace(current, api_key_id=principal.key.id)
            started = await self._started(tx, principal.sender, current, order, now_ms())
            await repo.update_broadcast(tx, started)
        return started

    async def cancel(self, principal: Principal, broadcast_id: str) -> Broadcast:
        """Stop a scheduled or sending broadcast; members not yet accepted are never mailed."""
        async with self.db.transaction() as tx:
            current = await _existing(tx, principal.team_id, broadcast_id, for_update=True)
            if current.status not in UNDER_WAY:
                raise Conflict(
                    f"The broadcast is {current.status.value}; only a scheduled or sending "
                    "broadcast can be cancelled."
                )
            now = max(now_ms(), current.updated_at)
            cancelled = replace(
                current, status=BroadcastStatus.CANCELLED, updated_at=now, resumes_at=None
            )
            await repo.update_broadcast(tx, cancelled)
            await jobs_repo.drop(tx, JobKind.EXPAND_BROADCAST, current.id)
        return cancelled

    async def get(self, principal: Principal, broadcast_id: str) -> Broadcast:
        async with self.db.read() as tx:
            return await _existing(tx, principal.team_id, broadcast_id)

    async def stream(self, principal: Principal) -> AsyncIterator[Broadcast]:
        async with self.db.read() as tx:
            async for item in repo.stream_broadcasts(tx, principal.team_id):
                yield item

    async def page(
        self, principal: Principal, request: PageRequest
    ) -> tuple[list[Broadcast], bool]:
        async with self.db.read() as tx:
            page = await repo.page_broadcasts(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your broadcasts.")
        return page

    # Expansion: the ``expand_broadcast`` job.

    async def expand(self, job: Job) -> None:
        """Expand chunks until the broadcast is done, paused or stopped, or ``run_seconds``
        have passed (then the job is handed back, due again at once behind the jobs already
        due). Up to ``in_flight`` chunks are stored at once, each in its own transaction, and
        the next one is read and rendered meanwhile; a chunk moves the cursor only after the
        one before it has (``store_chunk``'s ``previous``)."""
        deadline = time.monotonic() + self.run_seconds
        run = _Run()
        window: deque[asyncio.Task[Step]] = deque()  # chunks being stored, oldest first
        after: str | None = None  # where the next chunk begins; None: at the stored cursor
        try:
            while True:
                chunk = await self.read_chunk(job, after, run=run)
                stopped = Step.NEXT  # what the oldest chunk's store came to, when waited for
                if len(window) >= self.in_flight:
                    stopped = await window.popleft()
                if stopped is Step.NEXT:
                    previous = window[-1] if window else None
                    window.append(asyncio.create_task(self._store(job, chunk, previous)))
                    after = self._last_of_full(chunk)
                    if after is not None and time.monotonic() < deadline:
                        continue
                step = await _outcome(window, stopped)
                if step is Step.DONE:
                    return
                if step is Step.NEXT or time.monotonic() >= deadline:
                    await self._hand_back(job)
                    return
                after = None  # stale: read again from the stored cursor
        finally:
            await _dropped(window)

    def _last_of_full(self, chunk: Chunk | None) -> str | None:
        """The contact a full chunk ends with (the next chunk follows it); None otherwise."""
        if chunk is None or chunk.failure is not None or len(chunk.plan) < self.chunk_size:
            return None
        return chunk.plan[-1][0].contact.id

    async def _store(self, job: Job, chunk: Chunk | None, previous: Awaitable[Step] | None) -> Step:
        async with self.db.transaction() as tx:
            return await self.store_chunk(tx, job, chunk, previous=previous)

    async def _hand_back(self, job: Job) -> None:
        """The run is over: the job is due again at once, behind the jobs already due."""
        async with self.db.transaction() as tx:
            await jobs_repo.retry_at(tx, job, now_ms())

    async def read_chunk(
        self, job: Job, after: str | None = None, *, run: _Run | None = None
    ) -> Chunk | None:
        """The members after the broadcast's cursor (or after the contact ``after``) and their
        emails, read and rendered without holding the write lock (SQLite) or the broadcast's
        row; None when the broadcast is not under way. ``store_chunk`` stores it only if the
        cursor is then where the chunk begins. The sender and content are checked once per
        ``run``."""
        assert job.team_id is not None
        run = run or _Run()
        async with self.db.read() as tx:
            current = await repo.get_broadcast(tx, job.team_id, job.ref)
            if current is None or current.status not in UNDER_WAY:
                return None
            start = current.cursor if after is None else after
            if run.checked is None:
                sender = await self._sender_of(tx, current)
                try:
                    run.checked = (sender, await self._sendable(tx, sender, current.content))
                except PosthasteError as exc:
                    return Chunk(current, start, sender, [], [], exc)
            sender, sendable = run.checked
            content = current.content
            members = await repo.members_after(
                tx, current.team_id, content.segment_id, content.topic_id, start,
                self.chunk_size,
            )  # fmt: skip
        plan = [(m, skip_reason(m, sendable.topic_default)) for m in members]
        requests = [self._request(current, sendable, m.contact) for m, skip in plan if not skip]
        return Chunk(current, start, sender, plan, requests)

    async def store_chunk(
        self, tx: Tx, job: Job, chunk: Chunk | None, *, previous: Awaitable[Step] | None = None
    ) -> Step:
        """Accept the chunk's emails, then, once ``previous`` (the store of the chunk before
        it) is over, hold the broadcast's row and move the cursor and counts, all in the
        caller's transaction. A chunk that does not begin at the cursor (another worker moved
        it, or the chunk before it stored nothing) or was read before a cancel stores nothing:
        its emails are rolled back to a savepoint taken before them."""
        assert job.team_id is not None
        outcomes: list[Outcome] = []
        async with tx.conn.begin_nested() as accepting:
            if chunk is not None and chunk.failure is None:
                outcomes = await self.sending.accept_in(
                    tx, chunk.sender, Origin.BROADCAST, chunk.requests
                )
            if previous is not None and await previous is not Step.NEXT:
                await accepting.rollback()
                return Step.STALE
            current = await repo.get_broadcast(tx, job.team_id, job.ref, for_update=True)
            under_way = current is not None and current.status in UNDER_WAY
            if not under_way or chunk is None or current is None or chunk.after != current.cursor:
                await accepting.rollback()
        if current is None or not under_way:
            await jobs_repo.finish(tx, job)
            return Step.DONE
        if chunk is None or chunk.after != current.cursor:
            return Step.STALE
        return await self._moved(tx, job, current, chunk, outcomes)

    async def _moved(
        self, tx: Tx, job: Job, current: Broadcast, chunk: Chunk, outcomes: list[Outcome]
    ) -> Step:
        """The cursor and counts moved past the stored chunk (or the broadcast failed, paused
        or sent), with the broadcast's row held."""
        now = now_ms()
        if chunk.failure is not None:
            failed = replace(current, status=BroadcastStatus.FAILED, error=chunk.failure.message)
            await self._ended(tx, job, replace(failed, sent_at=now, updated_at=now))
            return Step.DONE
        tally = tally_chunk(chunk.plan, outcomes)
        updated = replace(
            current,
            status=BroadcastStatus.SENDING,
            counts=current.counts + tally.counts,
            cursor=tally.cursor or current.cursor,
            resumes_at=None,
            error=None,
            updated_at=max(now, current.updated_at),
        )
        if tally.quota is not None:
            resumes_at = next_utc_day(now)
            paused = replace(updated, resumes_at=resumes_at, error=tally.quota.message)
            await repo.update_broadcast(tx, paused)
            await jobs_repo.retry_at(tx, job, resumes_at)
            return Step.DONE
        if len(chunk.plan) < self.chunk_size:
            await self._ended(tx, job, replace(updated, status=BroadcastStatus.SENT, sent_at=now))
            return Step.DONE
        await repo.update_broadcast(tx, updated)
        return Step.NEXT

    async def _ended(self, tx: Tx, job: Job, final: Broadcast) -> None:
        await repo.update_broadcast(tx, final)
        await jobs_repo.finish(tx, job)

    def _request(
        self, broadcast: Broadcast, sendable: _Sendable, contact: Contact
    ) -> SendRequest | PosthasteError:
        """One member's email, rendered for it (a rendering error stays with its member)."""
        content = broadcast.content
        token = self.links.token(contact.team_id, contact.id)
        try:
            to = parse_address(contact.email, "to")
            rendered = sendable.content.render(contact, self.links.url_of(token))
            subject = subject_of(rendered.subject, content.template)
        except PosthasteError as exc:
            return exc
        return SendRequest(
            from_=sendable.from_, to=[to], cc=[], bcc=[], reply_to=sendable.reply_to,
            subject=subject, html=rendered.html, text=rendered.text,
            headers=self.links.headers(token, sendable.from_.domain),
            tags={}, data={}, scheduled_at=None, template=None, stream_id=content.stream_id,
            broadcast_id=broadcast.id, template_id=sendable.source.template_id,
        )  # fmt: skip

    async def _sender_of(self, tx: Tx, broadcast: Broadcast) -> Sender:
        """Who sends the broadcast's mail: its team, as the key that sent it."""
        team = await teams_repo.get_team(tx, broadcast.team_id)
        assert team is not None  # a team's broadcasts go with it
        key = None
        if broadcast.api_key_id is not None:
            key = await keys_repo.get_key(tx, broadcast.team_id, broadcast.api_key_id)
        return Sender(team, key)

    async def _check_references(
        self, tx: Tx, sender: Sender, content: BroadcastContent
    ) -> str | None:
        """The segment, topic, stream, template and sender domain a draft names exist (the
        domain: may be sent from by this key); the topic's default subscription, if any."""
        team_id = sender.team_id
        if await segments_repo.get_segment(tx, team_id, content.segment_id) is None:
            raise ValidationError(
                f"'segment_id' {content.segment_id!r} is not one of your segments."
            )
        topic_default = None
        if content.topic_id is not None:
            topic = await topics_repo.get_topic(tx, team_id, content.topic_id)
            if topic is None:
                raise ValidationError(f"'topic_id' {content.topic_id!r} is not one of your topics.")
            topic_default = topic.default_subscription
        if await streams_repo.get_stream(tx, team_id, content.stream_id) is None:
            raise ValidationError(
                f"The stream {content.stream_id!r} does not exist; see GET /streams."
            )
        if content.template is not None and not await templates_repo.get_sendable(
            tx, team_id, content.template
        ):
            raise ValidationError(
                f"Template {content.template!r} was not found; give the id or alias of one of "
                "your templates (GET /templates)."
            )
        await self.senders.region_for(tx, sender, parse_address(content.from_, "from"))
        return topic_default

    async def _sendable(self, tx: Tx, sender: Sender, content: BroadcastContent) -> _Sendable:
        """The content checked as a draft is, and its template (published, for live keys)
        parsed; ``ValidationError`` (or the domain's 403) names what is wrong."""
        topic_default = await self._check_references(tx, sender, content)
        source = await self.content.source(
            tx, sender, content.template, content.subject, content.html, content.text
        )
        return _Sendable(
            source,
            MemberContent(source.parsed, source.fallbacks, content.data, content.preview_text),
            parse_address(content.from_, "from"),
            parse_address_list(content.reply_to, "reply_to"),
            topic_default,
        )

    async def _started(
        self, tx: Tx, sender: Sender, broadcast: Broadcast, order: SendOrder, now: int
    ) -> Broadcast:
        """The draft checked whole (a sample member's content renders) and its job queued."""
        check_complete(broadcast.content)
        sendable = await self._sendable(tx, sender, broadcast.content)
        _check_renders(self._request(broadcast, sendable, _sample(broadcast.team_id)))
        due = order.scheduled_at if order.scheduled_at is not None else now
        await jobs_repo.enqueue(
            tx, JobKind.EXPAND_BROADCAST, broadcast.id, broadcast.team_id, due, now
        )
        status = (
            BroadcastStatus.SENDING if order.scheduled_at is None else BroadcastStatus.SCHEDULED
        )
        return replace(
            broadcast, status=status, scheduled_at=order.scheduled_at,
            updated_at=max(now, broadcast.updated_at),
        )  # fmt: skip

    async def _draft(self, tx: Tx, principal: Principal, broadcast_id: str, verb: str) -> Broadcast:
        current = await _existing(tx, principal.team_id, broadcast_id, for_update=True)
        if current.status is not BroadcastStatus.DRAFT:
            raise Conflict(f"The broadcast is {current.status.value}; only a draft can be {verb}.")
        return current


async def _existing(
    tx: Tx, team_id: str, broadcast_id: str, *, for_update: bool = False
) -> Broadcast:
    found = None
    if is_uuid(broadcast_id):
        found = await repo.get_broadcast(tx, team_id, broadcast_id.lower(), for_update=for_update)
    if found is None:
        raise NotFound(f"Broadcast {broadcast_id!r} was not found.")
    return found


async def _outcome(window: deque[asyncio.Task[Step]], stopped: Step) -> Step:
    """What the chunks still being stored came to, in order: the first one that did not
    store (``stopped``, when that was the one before them) decides, and the ones after it
    store nothing; NEXT when all of them stored."""
    outcome = None if stopped is Step.NEXT else stopped
    while window:
        step = await window.popleft()
        if outcome is None and step is not Step.NEXT:
            outcome = step
    return outcome or Step.NEXT


async def _dropped(window: deque[asyncio.Task[Step]]) -> None:
    """Chunks still being stored when the run stopped on an error: rolled back."""
    for task in window:
        task.cancel()
    await asyncio.gather(*window, return_exceptions=True)
    window.clear()


def _sample(team_id: str) -> Contact:
    """A member with every field, to check that the content renders before it is sent."""
    return Contact(
        SAMPLE_CONTACT_ID, team_id, "contact@example.com", "contact@example.com", "Ann", "Lee",
        False, {}, 0, 0,
    )  # fmt: skip


def _check_renders(request: SendRequest | PosthasteError) -> None:
    if isinstance(request, PosthasteError):
        raise ValidationError(f"The broadcast's content does not render: {request.message}")
