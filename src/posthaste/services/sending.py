"""The one send path. REST, batch, the SMTP relay, broadcasts and automations all call it.

Each entry point parses its input into ``SendRequest``s (``core.send_request``,
``core.submission``) and makes one call: ``accept()`` for one email (with its idempotency key,
if any: reservation, replay and release happen here) or ``accept_batch()`` for several, each
succeeding or failing on its own. The caller names the ``Sender`` (a team, and the API key it
came through, or none for the system's own senders) and the ``Origin``, stored on the email.

Every item goes through named steps, each returning the items with the ones it stopped carrying
their error (PRODUCT §4's order; authentication and rate limit happen before, at the door):
parsed → checked (stream, template, domain) → not suppressed (nor, on a broadcast stream,
unsubscribed) → within quota → stored. Concurrent calls share one transaction
(``GroupCommit``); a failing check stores nothing for its item. Calls of one email (``POST
/emails``, the relay's messages) group in a lane of their own beside batches, so that a lone
request never waits for a group of hundreds of batch items to be checked and stored first;
and while lone calls are arriving, a group yields to the event loop every ``YIELD_EVERY`` items
as it checks them, so that they are read and served meanwhile.

Mail on a broadcast stream, whichever entry point it came through, goes to one recipient and
carries ``List-Unsubscribe`` and ``List-Unsubscribe-Post`` (RFC 2369, RFC 8058): a broadcast's
own (naming its contact), the sender's own when given, else ours naming the email
(``core.unsubscribe``), so that the link unsubscribes exactly the person it was sent to.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

import orjson

from posthaste.core.addresses import Address
from posthaste.core.idempotency import IdempotencyKey
from posthaste.core.ids import new_id, now_ms
from posthaste.core.mime import make_message_id
from posthaste.core.models import Email, Origin, Sender, assembled
from posthaste.core.send_request import SendRequest
from posthaste.core.serialize import email_event_data, email_record
from posthaste.core.status import EmailStatus, event_for
from posthaste.core.submission import with_message_id
from posthaste.core.unsubscribe import UnsubscribeLinks, has_own_list_unsubscribe, header_lines
from posthaste.errors import (
    DailyQuotaExceeded,
    PosthasteError,
    RecipientSuppressed,
    RecipientUnsubscribed,
    ValidationError,
)
from posthaste.services.group_commit import GroupCommit
from posthaste.services.idempotency import IdempotencyService, Replay
from posthaste.services.metrics import Metrics
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import emails as emails_repo
from posthaste.storage import limits as limits_repo
from posthaste.storage import streams as streams_repo
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.dialects import Forms

DAY_MS = 86_400_000
MAX_EMAILS_PER_TRANSACTION = 1000
# While lone calls arrive (one in the last ``LONE_RECENT_S``), a group's checks hand the event
# loop back every ``YIELD_EVERY`` items: checking an item costs ~75 µs of CPU and rarely waits,
# so a group of 800 batch items would hold the loop for tens of milliseconds, and a lone
# request arriving meanwhile would wait for it. It halves their p99 under a flood of batches,
# and costs the batches ~11 % of their rate (bench/README.md, "Lone sends beside batches"):
# paid only when someone is waiting for a lone send.
YIELD_EVERY = 32
LONE_RECENT_S = 1.0
# Groups of the batch lane in flight at once: on PostgreSQL two, so that one group's statement
# runs in its backend while the next group is checked and built in this process (one at a time,
# a batch's storing statement ran on one PostgreSQL core with the other idle: bench/README.md,
# "Two batch groups in flight"); SQLite has one writer. The lone lane keeps one: its groups are
# as large as what waits, and a second run would halve them.
BATCH_GROUPS_IN_FLIGHT = Forms(postgresql=2, sqlite=1)

Parsed = SendRequest | PosthasteError  # a batch item as its entry point read it
Outcome = Email | PosthasteError
_Streams = dict[tuple[str, str], str | None]  # (team, stream id) → its type (None: no such stream)
BROADCAST_STREAM = "broadcast"
TRANSACTIONAL_STREAM = "transactional"


@dataclass(frozen=True)
class Content:
    """What a message says once its template (if any) is resolved and rendered."""

    subject: str
    html: str | None
    text: str | None
    template_id: str | None = None


class ContentResolver(Protocol):
    """Turns a request's template reference and data into final content (templates issue)."""

    async def resolve(self, tx: Tx, sender: Sender, request: SendRequest) -> Content: ...


class SenderPolicy(Protocol):
    """Decides whether the team may send from a domain, and in which region (domains issue)."""

    async def region_for(self, tx: Tx, sender: Sender, from_: Address) -> str: ...


@dataclass(frozen=True)
class _Call:
    """One caller's items (a single send or a batch), answered together."""

    sender: Sender
    origin: Origin
    items: Sequence[Parsed]
    idempotency: IdempotencyKey | None = None

    def writes_besides_emails(self) -> bool:
        """Whether storing its items writes more than emails (a quota count, a kept response)."""
        return self.idempotency is not None or self.sender.team.daily_quota > 0


class _Item:
    """One email on its way through the steps: its request, then its email, or the error that
    stopped it (a stopped item passes through the later steps untouched).

    Changed in place by the steps (each item belongs to one group, read by one task): a
    frozen copy per step (``dataclasses.replace``) cost a few µs an item for nothing."""

    __slots__ = ("added_headers", "call", "email", "error", "on_broadcast_stream", "request")

    def __init__(
        self, call: _Call, request: SendRequest | None, error: PosthasteError | None = None
    ) -> None:
        self.call = call
        self.request = request
        self.email: Email | None = None
        self.error = error
        self.on_broadcast_stream = False
        # Header fields the send path added (List-Unsubscribe): a kept submission gets them too.
        self.added_headers: Mapping[str, str] = _NO_HEADERS

    @property
    def pending(self) -> bool:
        return self.error is None

    @property
    def team_id(self) -> str:
        return self.call.sender.team_id

    def stopped(self, error: PosthasteError) -> _Item:
        self.error = error
        return self

    def outcome(self) -> Outcome:
        if self.error is not None:
            return self.error
        assert self.email is not None
        return self.email


_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def _parsed(call: _Call) -> list[_Item]:
    """Step 1: the call's items as its entry point parsed them."""
    return [
        _Item(call, None, item) if isinstance(item, PosthasteError) else _Item(call, item)
        for item in call.items
    ]


class SendingService:
    def __init__(
        self,
        db: Database,
        content: ContentResolver,
        senders: SenderPolicy,
        idempotency: IdempotencyService,
        links: UnsubscribeLinks,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.metrics = metrics or Metrics()
        self.content = content
        self.senders = senders
        self.idempotency = idempotency
        self.links = links
        # Two lanes, each grouping what waits for it: calls of one email, and the others. The
        # lone lane's groups have their suppression check made with their writes.
        self._lone: GroupCommit[_Call, list[Outcome]] = self._lane(folding=True, runs=1)
        self._lone_at = float("-inf")  # when the last lone call came (monotonic seconds)
        self._group: GroupCommit[_Call, list[Outcome]] = self._lane(
            folding=False, runs=db.dialect.pick(BATCH_GROUPS_IN_FLIGHT)
        )

    def _lane(self, *, folding: bool, runs: int) -> GroupCommit[_Call, list[Outcome]]:
        return GroupCommit(
            functools.partial(self._accept_group, folding=folding),
            weight=lambda call: len(call.items),
            max_weight=MAX_EMAILS_PER_TRANSACTION,
            runs=runs,
        )

    def _submit(self, call: _Call) -> Awaitable[list[Outcome]]:
        if len(call.items) != 1:
            return self._group.submit(call)
        self._lone_at = time.monotonic()
        return self._lone.submit(call)

    def _yielding(self) -> bool:
        return time.monotonic() - self._lone_at < LONE_RECENT_S

    async def accept(
        self,
        sender: Sender,
        origin: Origin,
        request: SendRequest,
        *,
        idempotency: IdempotencyKey | None = None,
    ) -> Email | Replay:
        """Accept one email or raise the first failing check's error; nothing half-stored.

        With an idempotency key: a key seen before with the same request answers with the
        original response (a ``Replay``), with another request or still in flight raises 409."""
        call = _Call(sender, origin, [request], idempotency)
        if idempotency is None:
            return _single(await self._submit(call))
        replay = await self.idempotency.reserve(sender.team_id, idempotency)
        if replay is not None:
            return replay
        try:
            return _single(await self._submit(call))
        except Exception:
            await self.idempotency.release(sender.team_id, idempotency)
            raise

    async def accept_batch(
        self, sender: Sender, origin: Origin, items: Sequence[Parsed]
    ) -> list[Outcome]:
        """Accept each item on its own (one that failed parsing keeps its error); the accepted
        ones are stored in one transaction."""
        return await self._submit(_Call(sender, origin, items))

    async def accept_in(
        self, tx: Tx, sender: Sender, origin: Origin, items: Sequence[Parsed]
    ) -> list[Outcome]:
        """``accept_batch`` inside the caller's transaction, so that the caller's own writes
        commit with the accepted emails or not at all (a broadcast's cursor and counts)."""
        call = _Call(sender, origin, items)
        [outcomes] = await self._steps(tx, [call], now_ms())
        return outcomes

    async def accept_within(
        self, tx: Tx, sender: Sender, origin: Origin, request: SendRequest
    ) -> Email:
        """One email inside the caller's transaction, or the first failing check's error: an
        automation's step stores its email with its own progress, so that either both happen
        or neither does (a step never mails twice)."""
        return _single(await self.accept_in(tx, sender, origin, [request]))

    async def accept_each_in(
        self, tx: Tx, origin: Origin, items: Sequence[tuple[Sender, SendRequest]]
    ) -> list[Outcome]:
        """Several emails, each for its own sender and each accepted or refused on its own,
        inside the caller's transaction and with the grouped statements of a batch (one
        suppression check per team, one insert for them all): the send steps of a claimed batch
        of automation jobs, stored with the steps' progress."""
        calls = [_Call(sender, origin, [request]) for sender, request in items]
        return [outcome for [outcome] in await self._steps(tx, calls, now_ms())]

    async def _accept_group(self, calls: list[_Call], *, folding: bool) -> list[list[Outcome]]:
        """Every call's items through the steps, stored in one unit of work. When storing the
        emails is the group's only write (no daily quota to count, no response to keep), that
        one statement commits by itself (``Database.autocommit``)."""
        writes_more = any(call.writes_besides_emails() for call in calls)
        unit = self.db.transaction() if writes_more else self.db.autocommit()
        async with unit as tx:
            return await self._steps(tx, calls, now_ms(), folding=folding)

    async def _steps(
        self, tx: Tx, calls: list[_Call], now: int, *, folding: bool = False
    ) -> list[list[Outcome]]:
        items = [item for call in calls for item in _parsed(call)]
        streams: _Streams = {}
        checked = []
        for index, item in enumerate(items):
            if index and index % YIELD_EVERY == 0 and self._yielding():
                await asyncio.sleep(0)
            checked.append(await self._checked(tx, item, now, streams))
        items = checked
        folded = folding and _suppression_check_folds(items)
        if not folded:
            items = await _unsuppressed(tx, items)
        items = await _not_unsubscribed(tx, items)
        items = await _within_quota(tx, items, now)
        await _stored(tx, items, now, check_suppressions=folded)
        self._count(items)
        return [[item.outcome() for item in group] for group in _by_call(items, calls)]

    async def _checked(self, tx: Tx, item: _Item, now: int, streams: _Streams) -> _Item:
        """Step 2: stream, template and domain; a passing item gets its email."""
        if item.request is None or not item.pending:
            return item
        sender, request = item.call.sender, item.request
        try:
            stream_id, broadcast = await _stream(tx, sender.team_id, request.stream_id, streams)
            if broadcast:
                _check_one_recipient(request, stream_id)
            content = await self.content.resolve(tx, sender, request)
            region = await self.senders.region_for(tx, sender, request.from_)
        except PosthasteError as exc:
            return item.stopped(exc)
        item.email = _build_email(item.call, request, content, stream_id, region, now)
        if not broadcast:
            return item
        item.on_broadcast_stream = True
        return self._with_unsubscribe(item)

    def _with_unsubscribe(self, item: _Item) -> _Item:
        """A broadcast-stream email with the sender's own ``List-Unsubscribe`` (a broadcast's,
        naming its contact, or the caller's) as it is; else with ours, naming the email."""
        request, email = item.request, item.email
        assert request is not None and email is not None
        if has_own_list_unsubscribe(request.headers, request.raw):
            return item
        token = self.links.email_token(email.team_id, email.id)
        added = self.links.headers(token, request.from_.domain)
        kept = {k: v for k, v in email.headers.items() if k.lower() != "list-unsubscribe-post"}
        item.email = replace(email, headers={**kept, **added})
        item.added_headers = added
        return item

    def _count(self, items: list[_Item]) -> None:
        """Each stored email, by entry point and stream type (``posthaste_emails_accepted``).
        Counted once stored: a caller's transaction that then rolls back (a broadcast's chunk,
        an automation's step) is rare enough not to be worth a hook on its commit."""
        for item in _pending(items):
            stream = BROADCAST_STREAM if item.on_broadcast_stream else TRANSACTIONAL_STREAM
            self.metrics.email_accepted(item.call.origin.value, stream)


def _single(outcomes: list[Outcome]) -> Email:
    [outcome] = outcomes
    if isinstance(outcome, PosthasteError):
        raise outcome
    return outcome


def _by_call(items: list[_Item], calls: list[_Call]) -> Iterator[list[_Item]]:
    """The items again as their calls gave them (the steps keep their order)."""
    position = 0
    for call in calls:
        yield items[position : position + len(call.items)]
        position += len(call.items)


async def _stream(tx: Tx, team_id: str, stream_id: str | None, known: _Streams) -> tuple[str, bool]:
    """The item's stream and whether it is a broadcast stream, checked once per group (a
    broadcast's chunk names one stream)."""
    if stream_id is None:
        return "transactional", False
    if (team_id, stream_id) not in known:
        stream = await streams_repo.get_stream(tx, team_id, stream_id)
        known[team_id, stream_id] = None if stream is None else stream.type
    kind = known[team_id, stream_id]
    if kind is None:
        raise ValidationError(f"The stream {stream_id!r} does not exist; see GET /streams.")
    return stream_id, kind == BROADCAST_STREAM


def _check_one_recipient(request: SendRequest, stream_id: str) -> None:
    """Mail on a broadcast stream goes to one person: its unsubscribe link names them alone
    (one message carries one ``List-Unsubscribe``)."""
    if len(request.recipients()) != 1:
        raise ValidationError(
            f"Mail on the broadcast stream {stream_id!r} goes to one recipient per email (to, "
            "cc and bcc together), so that its unsubscribe link names only that person; send "
            "one email per recipient (POST /emails/batch takes 100)."
        )


def _suppression_check_folds(items: list[_Item]) -> bool:
    """Whether a group of the lone lane (``POST /emails``, relayed messages) may have its
    suppression check (step 3) made with its writes (step 5, ``emails.store_rows``: on SQLite
    in their hop to the connection's thread), when no step between them applies (no
    broadcast stream, no daily quota). A listed recipient then has the group stored again
    without its item: little for a few lone calls, a batch's worth for a batch, so batches
    (and the groups callers make in their own transactions) keep the check of their own."""
    return all(
        not item.on_broadcast_stream and item.call.sender.team.daily_quota == 0
        for item in _pending(items)
    )


async def _unsuppressed(tx: Tx, items: list[_Item]) -> list[_Item]:
    """Step 3: an item with a recipient on its team's suppression list stops with a 422 naming
    it. One query per team of the group."""
    listed = await _recipients_found(tx, list(_pending(items)), suppressions_repo.find_listed)
    return [_stopped_if_among(item, listed, _suppressed) for item in items] if listed else items


async def _not_unsubscribed(tx: Tx, items: list[_Item]) -> list[_Item]:
    """Step 3b: on a broadcast stream, an item whose recipient is one of its team's
    unsubscribed contacts stops with a 422 naming it (transactional mail still reaches them).
    One query per team with broadcast-stream items in the group."""
    broadcast = [item for item in _pending(items) if item.on_broadcast_stream]
    gone = await _recipients_found(tx, broadcast, contacts_repo.unsubscribed_among)
    if not gone:
        return items
    return [
        _stopped_if_among(item, gone, _unsubscribed) if item.on_broadcast_stream else item
        for item in items
    ]


async def _recipients_found(
    tx: Tx, items: list[_Item], lookup: Callable[[Tx, str, list[str]], Awaitable[Iterable[str]]]
) -> set[tuple[str, str]]:
    """``(team, address)`` of the items' recipients that ``lookup`` finds among each team's
    addresses: one query per team."""
    by_team: dict[str, set[str]] = {}
    for item in items:
        assert item.request is not None
        by_team.setdefault(item.team_id, set()).update(a for a, _ in item.request.recipients())
    found: set[tuple[str, str]] = set()
    for team_id, addresses in by_team.items():
        if addresses:
            found.update((team_id, a) for a in await lookup(tx, team_id, sorted(addresses)))
    return found


def _stopped_if_among(
    item: _Item, found: set[tuple[str, str]], error: Callable[[str], PosthasteError]
) -> _Item:
    """The pending item stopped with ``error(address)`` for its first recipient in ``found``."""
    if not item.pending or item.request is None:
        return item
    for address, _ in item.request.recipients():
        if (item.team_id, address) in found:
            return item.stopped(error(address))
    return item


def _suppressed(address: str) -> PosthasteError:
    return RecipientSuppressed(
        f"The recipient {address} is on the suppression list; remove it from /suppressions to "
        "send to it again."
    )


def _unsubscribed(address: str) -> PosthasteError:
    return RecipientUnsubscribed(
        f"The recipient {address} unsubscribed from your broadcast mail (its contact is "
        "unsubscribed); it still receives mail on transactional streams. If they subscribe "
        "again, PATCH the contact with unsubscribed: false."
    )


async def _within_quota(tx: Tx, items: list[_Item], now: int) -> list[_Item]:
    """Step 4: count each team's items against its daily quota; those beyond it stop, in the
    order they arrived. One statement per team with a quota (two when it runs out)."""
    by_team: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.pending and item.call.sender.team.daily_quota > 0:
            by_team.setdefault(item.team_id, []).append(index)
    over: list[int] = []
    # Teams' counters in one order, whichever transaction counts them: two groups counting the
    # same teams at once (two lanes, or two API processes) wait for each other, never deadlock.
    for team_id, indexes in sorted(by_team.items()):
        quota = items[indexes[0]].call.sender.team.daily_quota
        room = await _room_for(tx, team_id, quota, len(indexes), now)
        over.extend(indexes[room:])
    for index in over:
        items[index] = items[index].stopped(
            _quota_exceeded(items[index].call.sender.team.daily_quota, now)
        )
    return items


async def _room_for(tx: Tx, team_id: str, quota: int, wanted: int, now: int) -> int:
    """How many of ``wanted`` emails fit in the team's quota today; counts them as used."""
    day = now // DAY_MS
    if await limits_repo.add_daily_usage(tx, team_id, day, wanted, quota):
        return wanted
    room = max(0, quota - await limits_repo.daily_usage_of(tx, team_id, day))
    if room:
        await limits_repo.add_daily_usage(tx, team_id, day, room, quota)
    return room


def _quota_exceeded(quota: int, now: int) -> DailyQuotaExceeded:
    reset_in = max(1, ((now // DAY_MS + 1) * DAY_MS - now) // 1000)
    return DailyQuotaExceeded(
        f"The daily quota of {quota} emails is used up; it resets at 00:00 UTC.",
        retry_after=reset_in,
        limit=quota,
        reset=reset_in,
    )


async def _stored(tx: Tx, items: list[_Item], now: int, *, check_suppressions: bool) -> None:
    """Step 5: the passing items' emails with their first events and delivery jobs, and each
    idempotent call's response, in the group's unit of work. ``check_suppressions``: step 3
    made with the writes, which store nothing when a recipient is listed; the items with one
    stop as step 3 stops them, and the others are stored without them."""
    accepted = list(_pending(items))
    checked = _recipients_of(accepted) if check_suppressions else []
    while accepted:
        listed = await emails_repo.store_rows(tx, _accepted_rows(accepted, now), checked)
        if not listed:
            break
        found = set(listed)
        accepted = [
            item for item in accepted if _stopped_if_among(item, found, _suppressed).pending
        ]
        checked = []  # the others' recipients were checked with them: none is listed
    for item in accepted:
        key = item.call.idempotency
        if key is not None and item.email is not None:
            body = orjson.dumps(email_record(item.email)).decode()
            await IdempotencyService.record(tx, item.team_id, key, body)


def _recipients_of(items: list[_Item]) -> list[tuple[str, str]]:
    """(team, address) of the items' recipients, each once."""
    pairs: dict[tuple[str, str], None] = {}
    for item in items:
        assert item.request is not None
        pairs.update(((item.team_id, a), None) for a, _ in item.request.recipients())
    return list(pairs)


def _accepted_rows(accepted: list[_Item], now: int) -> emails_repo.AcceptedRows:
    rows = emails_repo.AcceptedRows(now)
    for item in accepted:
        email, request = item.email, item.request
        assert email is not None and request is not None
        rows.add(
            email,
            request.from_.lookup_key,
            request.recipients(),
            request.attachments,
            _kept_raw(request, email, item.added_headers),
            email_event_data(email),
            email.scheduled_at if email.scheduled_at is not None else now,
        )
    return rows


def _kept_raw(
    request: SendRequest, email: Email, added: Mapping[str, str]
) -> tuple[bytes | memoryview, ...] | None:
    """A relay submission's bytes to keep: one without its own Message-ID gets the email's,
    and the header fields the send path added go on top (signed with the rest on delivery),
    above the lines the submission added (``raw_top``). In parts: a large message is not
    copied to put a line on top of it."""
    raw = request.raw
    if raw is None:
        return None
    on_top = header_lines(added) if added else b""
    if request.message_id is None:
        on_top += with_message_id(b"", email.message_id)
    on_top += request.raw_top
    kept = memoryview(raw)[request.raw_from :] if request.raw_from else raw
    return (on_top, kept) if on_top else (kept,)


def _pending(items: list[_Item]) -> Iterator[_Item]:
    return (item for item in items if item.pending)


def _build_email(
    call: _Call,
    request: SendRequest,
    content: Content,
    stream_id: str,
    region: str,
    now: int,
) -> Email:
    email_id = new_id()
    scheduled = request.scheduled_at is not None
    status = EmailStatus.SCHEDULED if scheduled else EmailStatus.QUEUED
    return assembled(
        Email,
        {
            "id": email_id,
            "team_id": call.sender.team_id,
            "mode": call.sender.mode,
            "from_address": request.from_.formatted(),
            "to": [a.formatted() for a in request.to],
            "cc": [a.formatted() for a in request.cc],
            "bcc": [a.formatted() for a in request.bcc],
            "reply_to": [a.formatted() for a in request.reply_to],
            "subject": content.subject,
            "html": content.html,
            "text": content.text,
            "headers": request.headers,
            "tags": request.tags,
            "status": status,
            "last_event": event_for(status),
            "created_at": now,
            "scheduled_at": request.scheduled_at,
            "sent_at": None,
            "template_id": content.template_id,
            "stream_id": stream_id,
            "broadcast_id": request.broadcast_id,
            "message_id": request.message_id or make_message_id(request.from_.domain, email_id),
            "provider_message_id": None,
            "region": region,
            "raw_blob_id": None if request.raw is None else new_id(),
            "attempts": 0,
            "origin": call.origin,
        },
    )
