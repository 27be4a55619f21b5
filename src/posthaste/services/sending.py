"""The one send path. REST, batch, the SMTP relay, broadcasts and automations all call it.

Checks run in PRODUCT §4's order (authentication and rate limit happen before, at the door):
fields → stream → template → domain ownership → suppression → quota, and then one transaction
stores the email, its recipients and tags, its attachments, its first event and its delivery
job. A failing check stores nothing. A batch runs every check per item and stores all accepted
items in that same single transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from posthaste.core.addresses import Address
from posthaste.core.ids import new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.mime import make_message_id
from posthaste.core.models import Email, Event, Principal
from posthaste.core.send_request import SendRequest, parse_send_request
from posthaste.core.serialize import email_event_data, email_record
from posthaste.core.status import EmailStatus
from posthaste.errors import (
    DailyQuotaExceeded,
    PosthasteError,
    RecipientSuppressed,
    ValidationError,
)
from posthaste.services.group_commit import GroupCommit
from posthaste.storage import emails as emails_repo
from posthaste.storage import events as events_repo
from posthaste.storage import idempotency as idempotency_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import limits as limits_repo
from posthaste.storage import streams as streams_repo
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import Database, Tx

DELIVER_JOB = JobKind.DELIVER_EMAIL
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Content:
    """What a message says once its template (if any) is resolved and rendered."""

    subject: str
    html: str | None
    text: str | None
    template_id: str | None = None


class ContentResolver(Protocol):
    """Turns a request's template reference and data into final content (templates issue)."""

    async def resolve(self, tx: Tx, principal: Principal, request: SendRequest) -> Content: ...


class SenderPolicy(Protocol):
    """Decides whether the team may send from a domain, and in which region (domains issue)."""

    async def region_for(self, tx: Tx, principal: Principal, sender: Address) -> str: ...


@dataclass(frozen=True)
class _Accepted:
    email: Email
    request: SendRequest


Outcome = Email | PosthasteError


@dataclass
class _Submission:
    """One caller's items (a single send or a batch), checked and stored in a shared transaction."""

    principal: Principal
    items: list[Outcome | SendRequest]
    idempotency_key: str | None


MAX_EMAILS_PER_TRANSACTION = 1000


class SendingService:
    def __init__(self, db: Database, content: ContentResolver, senders: SenderPolicy) -> None:
        self.db = db
        self.content = content
        self.senders = senders
        self._group: GroupCommit[_Submission, list[Outcome]] = GroupCommit(
            self._accept_group,
            weight=lambda submission: len(submission.items),
            max_weight=MAX_EMAILS_PER_TRANSACTION,
        )

    async def accept(
        self, principal: Principal, body: object, *, idempotency_key: str | None = None
    ) -> Email:
        """Accept one email or raise the first failing check's error; nothing half-stored.

        ``body`` is a request body, or a ``SendRequest`` already read from a relay submission.
        """
        [outcome] = await self._accept_all(principal, [body], idempotency_key)
        if isinstance(outcome, PosthasteError):
            raise outcome
        return outcome

    async def accept_batch(self, principal: Principal, items: Sequence[object]) -> list[Outcome]:
        """Accept each item independently; accepted ones are stored in one transaction."""
        return await self._accept_all(principal, items, None)

    async def _accept_all(
        self, principal: Principal, bodies: Sequence[object], idempotency_key: str | None
    ) -> list[Outcome]:
        now = now_ms()
        items: list[Outcome | SendRequest] = [_parse(body, now) for body in bodies]
        return await self._group.submit(_Submission(principal, items, idempotency_key))

    async def _accept_group(self, submissions: list[_Submission]) -> list[list[Outcome]]:
        """Check every submission and store what passed, all in one transaction.

        The checks keep PRODUCT §4's order for each item; the suppression list is read once
        per team for the whole group rather than once per submission. When the group's only
        write is storing its emails (no daily quota to count, no idempotent response to keep),
        that one statement commits by itself (``Database.autocommit``); otherwise a transaction
        holds the writes together.
        """
        now = now_ms()
        results: list[list[Outcome]] = []
        writes_more = any(_writes_besides_emails(s) for s in submissions)
        unit = self.db.transaction() if writes_more else self.db.autocommit()
        async with unit as tx:
            candidates = [
                await self._check_items(tx, s.principal, s.items, now) for s in submissions
            ]
            listed = await _suppressed_by_team(tx, submissions, candidates)
            to_store: list[_Accepted] = []
            for submission, checked in zip(submissions, candidates, strict=True):
                kept = _drop_suppressed(submission.items, checked, listed)
                accepted = await _finish_submission(tx, submission, kept, now)
                to_store.extend(item for _, item in accepted)
                results.append(_results(submission.items, accepted))
            if to_store:
                await _store(tx, to_store, now)
        return results

    async def _check_items(
        self, tx: Tx, principal: Principal, items: list[Outcome | SendRequest], now: int
    ) -> list[tuple[int, _Accepted]]:
        """Stream, template and domain checks per item; a failing item becomes its error."""
        accepted: list[tuple[int, _Accepted]] = []
        for index, item in enumerate(items):
            if not isinstance(item, SendRequest):
                continue
            try:
                accepted.append((index, await self._check_one(tx, principal, item, now)))
            except PosthasteError as exc:
                items[index] = exc
        return accepted

    async def _check_one(
        self, tx: Tx, principal: Principal, request: SendRequest, now: int
    ) -> _Accepted:
        stream_id = await _stream(tx, principal.team_id, request.stream_id)
        content = await self.content.resolve(tx, principal, request)
        region = await self.senders.region_for(tx, principal, request.from_)
        return _Accepted(_build_email(principal, request, content, stream_id, region, now), request)


def _results(
    items: list[Outcome | SendRequest], accepted: list[tuple[int, _Accepted]]
) -> list[Outcome]:
    """Each item's outcome in request order: its stored email or its error."""
    emails = {index: item.email for index, item in accepted}
    return [
        emails[index] if isinstance(item, SendRequest) else item for index, item in enumerate(items)
    ]


def _parse(body: object, now: int) -> Outcome | SendRequest:
    if isinstance(body, SendRequest):  # already parsed, e.g. from a relay submission
        return body
    try:
        return parse_send_request(body, now)
    except PosthasteError as exc:
        return exc


async def _stream(tx: Tx, team_id: str, stream_id: str | None) -> str:
    if stream_id is None:
        return "transactional"
    if await streams_repo.get_stream(tx, team_id, stream_id) is None:
        raise ValidationError(f"The stream {stream_id!r} does not exist; see GET /streams.")
    return stream_id


async def _suppressed_by_team(
    tx: Tx, submissions: list[_Submission], candidates: list[list[tuple[int, _Accepted]]]
) -> set[tuple[str, str]]:
    """``(team_id, address)`` pairs on a suppression list: one query per team of the group."""
    by_team: dict[str, set[str]] = {}
    for submission, checked in zip(submissions, candidates, strict=True):
        addresses = by_team.setdefault(submission.principal.team_id, set())
        addresses.update(address for _, item in checked for address, _ in item.request.recipients())
    listed: set[tuple[str, str]] = set()
    for team_id, addresses in by_team.items():
        if addresses:
            found = await suppressions_repo.find_listed(tx, team_id, sorted(addresses))
            listed.update((team_id, address) for address in found)
    return listed


def _drop_suppressed(
    items: list[Outcome | SendRequest],
    checked: list[tuple[int, _Accepted]],
    listed: set[tuple[str, str]],
) -> list[tuple[int, _Accepted]]:
    """Items with a suppressed recipient become a 422 naming it; the rest go on."""
    kept: list[tuple[int, _Accepted]] = []
    for index, candidate in checked:
        team_id = candidate.email.team_id
        hits = [r for r, _ in candidate.request.recipients() if (team_id, r) in listed]
        if hits:
            items[index] = RecipientSuppressed(
                f"The recipient {hits[0]} is on the suppression list; remove it from "
                "/suppressions to send to it again."
            )
        else:
            kept.append((index, candidate))
    return kept


def _writes_besides_emails(submission: _Submission) -> bool:
    """Whether ``_finish_submission`` will write for it (a quota count, a stored response)."""
    return submission.idempotency_key is not None or submission.principal.team.daily_quota > 0


async def _finish_submission(
    tx: Tx, submission: _Submission, kept: list[tuple[int, _Accepted]], now: int
) -> list[tuple[int, _Accepted]]:
    """The daily quota, then the idempotency key's stored response (same transaction)."""
    principal, items = submission.principal, submission.items
    accepted = await _apply_quota(tx, principal, kept, items, now)
    key = submission.idempotency_key
    if key is not None and accepted:
        body = orjson.dumps(email_record(accepted[0][1].email)).decode()
        await idempotency_repo.complete(tx, principal.team_id, key, 200, body)
    return accepted


async def _apply_quota(
    tx: Tx,
    principal: Principal,
    accepted: list[tuple[int, _Accepted]],
    outcomes: list[Outcome | SendRequest],
    now: int,
) -> list[tuple[int, _Accepted]]:
    """Count accepted items against the daily quota; items beyond it fail in request order."""
    quota = principal.team.daily_quota
    if quota <= 0 or not accepted:
        return accepted
    day = now // DAY_MS
    if await limits_repo.add_daily_usage(tx, principal.team_id, day, len(accepted), quota):
        return accepted
    room = max(0, quota - await limits_repo.daily_usage_of(tx, principal.team_id, day))
    if room:
        await limits_repo.add_daily_usage(tx, principal.team_id, day, room, quota)
    reset_in = (day + 1) * DAY_MS - now
    for index, _ in accepted[room:]:
        outcomes[index] = DailyQuotaExceeded(
            f"The daily quota of {quota} emails is used up; it resets at 00:00 UTC.",
            retry_after=max(1, reset_in // 1000),
            limit=quota,
            reset=max(1, reset_in // 1000),
        )
    return accepted[:room]


def _build_email(
    principal: Principal,
    request: SendRequest,
    content: Content,
    stream_id: str,
    region: str,
    now: int,
) -> Email:
    email_id = new_id()
    scheduled = request.scheduled_at is not None
    status = EmailStatus.SCHEDULED if scheduled else EmailStatus.QUEUED
    return Email(
        id=email_id,
        team_id=principal.team_id,
        mode=principal.key.mode,
        from_address=request.from_.formatted(),
        to=[a.formatted() for a in request.to],
        cc=[a.formatted() for a in request.cc],
        bcc=[a.formatted() for a in request.bcc],
        reply_to=[a.formatted() for a in request.reply_to],
        subject=content.subject,
        html=content.html,
        text=content.text,
        headers=request.headers,
        tags=request.tags,
        status=status,
        last_event=f"email.{status.value}",
        created_at=now,
        scheduled_at=request.scheduled_at,
        sent_at=None,
        template_id=content.template_id,
        stream_id=stream_id,
        broadcast_id=None,
        message_id=request.message_id or make_message_id(request.from_.domain, email_id),
        provider_message_id=None,
        region=region,
        raw_blob_id=None if request.raw is None else new_id(),
    )


async def _store(tx: Tx, accepted: Sequence[_Accepted], now: int) -> None:
    rows: dict[str, list[dict[str, Any]]] = {}
    job_rows: list[dict[str, Any]] = []
    first_events: list[Event] = []
    for item in accepted:
        email, request = item.email, item.request
        _add(rows, "emails", [emails_repo.email_row(email, request.from_.lookup_key)])
        _add(rows, "email_recipients", emails_repo.recipient_rows(email, request.recipients()))
        _add(rows, "email_tags", emails_repo.tag_rows(email))
        _add(rows, "email_subjects", [emails_repo.subject_row(email)])
        blob_rows, info_rows = emails_repo.attachment_rows(
            email,
            [
                emails_repo.NewAttachment(a.filename, a.content_type, a.content, a.content_id)
                for a in request.attachments
            ],
        )
        if email.raw_blob_id is not None and request.raw is not None:
            blob_rows.append(emails_repo.blob_row(email, email.raw_blob_id, request.raw))
        _add(rows, "blobs", blob_rows)
        _add(rows, "attachments", info_rows)
        first_events.append(
            Event(new_id(), email.team_id, email.last_event, email.id, now, email_event_data(email))
        )
        due = email.scheduled_at if email.scheduled_at is not None else now
        job_rows.append(jobs_repo.job_row(DELIVER_JOB, email.id, email.team_id, due, now))
    also = [*emails_repo.tables_of(rows), jobs_repo.enqueued(tx, job_rows)]
    await events_repo.insert_events(tx, first_events, also)


def _add(rows: dict[str, list[dict[str, Any]]], table: str, items: list[dict[str, Any]]) -> None:
    rows.setdefault(table, []).extend(items)
