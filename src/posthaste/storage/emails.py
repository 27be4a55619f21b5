"""Emails, their recipients, tags, attachments and status changes."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, exists, func, select, update

from posthaste.core.cursors import Position
from posthaste.core.events import EventType
from posthaste.core.ids import is_uuid, new_id
from posthaste.core.jobs import JobKind
from posthaste.core.models import (
    Attachment,
    AttachmentInfo,
    Email,
    EmailSummary,
    Event,
    KeyMode,
    NewEmail,
    NewJob,
    Origin,
)
from posthaste.core.status import EmailStatus, InvalidTransition, apply_event, can_move
from posthaste.storage import blobs as blobs_repo
from posthaste.storage import bulk
from posthaste.storage import events as events_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import suppressions as suppressions_repo
from posthaste.storage.database import Tx
from posthaste.storage.dialects import Dialect, Forms, among
from posthaste.storage.keyset import keyset_page
from posthaste.storage.suppressions import Recipient
from posthaste.storage.tables import (
    attachments,
    blobs,
    email_recipients,
    email_subjects,
    email_tags,
    emails,
    events,
    suppressions,
)


@dataclass(frozen=True)
class EmailFilter:
    status: str | None = None
    to: str | None = None
    from_: str | None = None
    subject: str | None = None
    tag: tuple[str, str] | None = None
    stream_id: str | None = None
    after: int | None = None
    before: int | None = None


# The columns of an ``Email``, in its field order: a row is built positionally (a batch of the
# delivery worker reads 64 at a time, twice; reading 26 attributes by name was ~30 µs a row).
_EMAIL_FIELDS = tuple(f.name for f in fields(Email))
_EMAIL_COLUMNS = tuple(emails.c[name] for name in _EMAIL_FIELDS)
_MODE = _EMAIL_FIELDS.index("mode")
_STATUS = _EMAIL_FIELDS.index("status")
_ORIGIN = _EMAIL_FIELDS.index("origin")


def _email(row: Any) -> Email:
    values = list(row)
    values[_MODE] = KeyMode(values[_MODE])
    values[_STATUS] = EmailStatus(values[_STATUS])
    values[_ORIGIN] = Origin(values[_ORIGIN])
    return Email(*values)


def _event(row: Any) -> Event:
    return Event(row.id, row.team_id, row.type, row.email_id, row.created_at, row.data)


def _email_row(email: Email, from_lookup: str) -> dict[str, Any]:
    """The ``emails`` row: the email's own fields (an ``Email``'s ``__dict__`` holds exactly
    them, copied at C speed where naming 28 attributes was a few µs an email), enums as their
    values, and the From address's lookup form."""
    row = dict(vars(email))
    row["mode"] = email.mode.value
    row["status"] = email.status.value
    row["origin"] = email.origin.value
    row["from_lookup"] = from_lookup
    return row


def _blob_row(email: Email, blob_id: str, data: tuple[bytes | memoryview, ...]) -> dict[str, Any]:
    """A ``blobs`` row of the email's team, e.g. the raw message a relay client submitted."""
    return {"id": blob_id, "team_id": email.team_id, "data": data, "created_at": email.created_at}


def _recipient_rows(email: Email, recipients: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """``recipients`` are (lookup address, kind) pairs, already de-duplicated."""
    return [
        {
            "email_id": email.id,
            "address": address,
            "team_id": email.team_id,
            "kind": kind,
            "outcome": "pending",
            "created_at": email.created_at,
        }
        for address, kind in recipients
    ]


def _subject_row(email: Email) -> dict[str, Any]:
    return {"email_id": email.id, "team_id": email.team_id, "subject": email.subject}


def _tag_rows(email: Email) -> list[dict[str, Any]]:
    return [
        {
            "email_id": email.id,
            "key": key,
            "value": value,
            "team_id": email.team_id,
            "created_at": email.created_at,
        }
        for key, value in email.tags.items()
    ]


def _attachment_rows(
    email: Email, items: Sequence[Attachment]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows for ``blobs`` and ``attachments`` (attachments kept in the database blob store)."""
    blob_rows: list[dict[str, Any]] = []
    info_rows: list[dict[str, Any]] = []
    for position, item in enumerate(items):
        blob_id = new_id()
        blob_rows.append(
            {
                "id": blob_id,
                "team_id": email.team_id,
                "data": item.content,
                "created_at": email.created_at,
            }
        )
        info_rows.append(
            {
                "id": new_id(),
                "email_id": email.id,
                "team_id": email.team_id,
                "position": position,
                "filename": item.filename,
                "content_type": item.content_type,
                "size": len(item.content),
                "content_id": item.content_id,
                "blob_id": blob_id,
            }
        )
    return blob_rows, info_rows


class AcceptedRows:
    """A group's accepted emails as the rows that store them (the email with its recipients,
    tags, subject, attachments and raw message, its first event and its delivery job), each
    row built once as the send path hands its email over (``add``), then written by
    ``store_rows``: no record in between that is copied again into a row."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.tables: dict[Table, list[dict[str, Any]]] = {t: [] for t in _ACCEPTED_TABLES}
        self.events: list[dict[str, Any]] = []
        self.jobs: list[dict[str, Any]] = []

    def add(
        self,
        email: Email,
        from_lookup: str,
        recipients: Sequence[tuple[str, str]],
        files: Sequence[Attachment],
        raw: tuple[bytes | memoryview, ...] | None,
        event_data: dict[str, Any],
        due_at: int,
    ) -> None:
        """``email`` with its (lookup address, kind) ``recipients`` (unique), its attachment
        ``files``, its first event (of type ``email.last_event``, carrying ``event_data``) and
        a delivery job due at ``due_at``; a relay submission's ``raw`` message kept as a blob."""
        tables = self.tables
        tables[emails].append(_email_row(email, from_lookup))
        tables[email_recipients].extend(_recipient_rows(email, recipients))
        if email.tags:
            tables[email_tags].extend(_tag_rows(email))
        tables[email_subjects].append(_subject_row(email))
        if files:
            blob_rows, info_rows = _attachment_rows(email, files)
            tables[blobs].extend(blob_rows)
            tables[attachments].extend(info_rows)
        if email.raw_blob_id is not None and raw is not None:
            tables[blobs].append(_blob_row(email, email.raw_blob_id, raw))
        first = self.now
        self.events.append(
            events_repo.new_event_row(email.team_id, email.last_event, email.id, first, event_data)
        )
        self.jobs.append(
            jobs_repo.job_row(JobKind.DELIVER_EMAIL, email.id, email.team_id, due_at, first)
        )


async def store_rows(
    tx: Tx, rows: AcceptedRows, unless_listed: Sequence[Recipient] = ()
) -> list[Recipient]:
    """Store a group's accepted emails (``AcceptedRows``) with their first events and jobs: on
    PostgreSQL one statement (see ``events.insert_events``), with the large blobs written in
    pieces before it (``storage.blobs``).

    ``unless_listed``: the group's (team, recipient) pairs, checked against the suppression
    list first: when any is listed, nothing is stored and those listed are returned. On
    SQLite the check runs in the writes' own hop to the connection's thread (SQLAlchemy's
    ``execute`` is three hops). On PostgreSQL, and before a blob large enough to be written
    apart, it is a query of its own: folded into the storing statement (a ``WITH`` part that
    the inserts depend on) it cost PostgreSQL more planning than the round trip it saved
    (bench/README.md, Accepting email)."""
    tables = rows.tables
    large = any(blobs_repo.in_pieces(blobs_repo.size(b["data"])) for b in tables[blobs])
    if unless_listed and (large or not tx.dialect.pick(_CHECKS_IN_HOP)):
        listed = await suppressions_repo.listed_among(tx, unless_listed)
        if listed:
            return listed
        unless_listed = ()
    owed = set(tx.channels)
    enqueued = jobs_repo.enqueued_rows(tx, rows.jobs)
    found: list[Recipient] = []

    async def statement(blob_rows: list[dict[str, Any]]) -> None:
        also = [*{**tables, blobs: blob_rows}.items(), enqueued]
        found.extend(await events_repo.insert_event_rows(tx, rows.events, also, unless_listed))

    await blobs_repo.store_blobs_with(tx, tables[blobs], statement)
    if found:
        tx.withdraw(owed)  # nothing was stored: no wake-up is owed for it
    return found


async def store_accepted(
    tx: Tx,
    accepted: Sequence[NewEmail],
    first_events: Sequence[Event],
    jobs: Sequence[NewJob],
    now: int,
) -> None:
    """``store_rows`` for emails, events and jobs given as records (the raw-insert baseline of
    ``bench/baseline.py``; the send path builds its rows with ``AcceptedRows``)."""
    rows = AcceptedRows(now)
    for item in accepted:
        email = item.email
        tables = rows.tables
        tables[emails].append(_email_row(email, item.from_lookup))
        tables[email_recipients].extend(_recipient_rows(email, item.recipients))
        tables[email_tags].extend(_tag_rows(email))
        tables[email_subjects].append(_subject_row(email))
        blob_rows, info_rows = _attachment_rows(email, item.attachments)
        if email.raw_blob_id is not None and item.raw is not None:
            blob_rows.append(_blob_row(email, email.raw_blob_id, item.raw))
        tables[blobs].extend(blob_rows)
        tables[attachments].extend(info_rows)
    rows.events.extend(events_repo.event_row(event) for event in first_events)
    rows.jobs.extend(jobs_repo.job_row(j.kind, j.ref, j.team_id, j.due_at, now) for j in jobs)
    await store_rows(tx, rows)


# Whether ``store_rows`` checks its ``unless_listed`` in the writes' hop (see there).
_CHECKS_IN_HOP = Forms(postgresql=False, sqlite=True)

# Parents first: each table's rows may refer to those of the tables before it.
_ACCEPTED_TABLES = (emails, email_recipients, email_tags, email_subjects, blobs, attachments)


async def get_email(
    tx: Tx, team_id: str, email_id: str, *, for_update: bool = False
) -> Email | None:
    query = select(*_EMAIL_COLUMNS).where(emails.c.team_id == team_id, emails.c.id == email_id)
    if for_update:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    return _email(row) if row else None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _email_filters(team_id: str, flt: EmailFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [emails.c.team_id == team_id]
    if flt.status:
        conditions.append(emails.c.status == flt.status)
    if flt.stream_id:
        conditions.append(emails.c.stream_id == flt.stream_id)
    if flt.from_:
        conditions.append(emails.c.from_lookup == flt.from_)
    if flt.subject:
        pattern = f"%{_escape_like(flt.subject.lower())}%"
        # EXISTS, not IN: SQLite then probes the row's subject by primary key while walking
        # the emails newest-first; PostgreSQL may instead start from the trigram index.
        s = email_subjects
        matching = select(s.c.email_id).where(
            s.c.email_id == emails.c.id, func.lower(s.c.subject).like(pattern, escape="\\")
        )
        conditions.append(matching.exists())
    return conditions


def _driver(team_id: str, flt: EmailFilter) -> tuple[Select[Any], Any, Any]:
    """The query and the (created_at, id) columns that drive a newest-first walk.

    With a ``to`` or ``tag`` filter the walk runs down that table's own (team, value,
    created_at, id) index and joins the emails, so a rare recipient or tag is found without
    scanning the team's whole history; otherwise it runs down the emails' own indexes.
    """
    if flt.to:
        r = email_recipients
        query = select(*_EMAIL_COLUMNS).join(r, r.c.email_id == emails.c.id)
        query = query.where(r.c.team_id == team_id, r.c.address == flt.to)
        return query, r.c.created_at, r.c.email_id
    if flt.tag:
        t = email_tags
        query = select(*_EMAIL_COLUMNS).join(t, t.c.email_id == emails.c.id)
        query = query.where(t.c.team_id == team_id, t.c.key == flt.tag[0], t.c.value == flt.tag[1])
        return query, t.c.created_at, t.c.email_id
    return select(*_EMAIL_COLUMNS), emails.c.created_at, emails.c.id


async def list_emails(
    tx: Tx,
    team_id: str,
    flt: EmailFilter,
    after_position: Position | None,
    limit: int,
    *,
    backwards: bool = False,
) -> list[Email]:
    """Newest first, strictly after ``after_position`` (the last row of the previous page); with
    ``backwards``, the rows strictly newer than it, the nearest first (storage.keyset)."""
    query, created_at, row_id = _driver(team_id, flt)
    query = query.where(*_email_filters(team_id, flt))
    if flt.to and flt.tag:
        key, value = flt.tag
        query = query.where(
            exists().where(
                email_tags.c.email_id == emails.c.id,
                email_tags.c.key == key,
                email_tags.c.value == value,
            )
        )
    if flt.after is not None:
        query = query.where(created_at > flt.after)
    if flt.before is not None:
        query = query.where(created_at < flt.before)
    query = keyset_page(
        query,
        created_at,
        row_id,
        newest_first=True,
        position=after_position,
        backwards=backwards,
        limit=limit,
    )
    return [_email(r) for r in await tx.conn.execute(query)]


async def list_events(tx: Tx, team_id: str, email_id: str) -> list[Event]:
    query = (
        select(events)
        .where(events.c.team_id == team_id, events.c.email_id == email_id)
        .order_by(events.c.id)
    )
    return [_event(r) for r in await tx.conn.execute(query)]


async def list_attachments(tx: Tx, team_id: str, email_id: str) -> list[AttachmentInfo]:
    query = (
        select(attachments)
        .where(attachments.c.team_id == team_id, attachments.c.email_id == email_id)
        .order_by(attachments.c.position)
    )
    return [_attachment_info(r) for r in await tx.conn.execute(query)]


async def find_attachment(
    tx: Tx, team_id: str, attachment_id: str, email_id: str | None = None
) -> AttachmentInfo | None:
    """The team's attachment by id (of that email when ``email_id`` is given)."""
    if not is_uuid(attachment_id) or (email_id is not None and not is_uuid(email_id)):
        return None
    query = select(attachments).where(
        attachments.c.team_id == team_id, attachments.c.id == attachment_id
    )
    if email_id is not None:
        query = query.where(attachments.c.email_id == email_id)
    row = (await tx.conn.execute(query)).first()
    return None if row is None else _attachment_info(row)


def _attachment_info(row: Any) -> AttachmentInfo:
    return AttachmentInfo(
        row.id, row.email_id, row.filename, row.content_type, row.size, row.content_id, row.blob_id
    )


async def read_blob(tx: Tx, team_id: str, blob_id: str) -> bytes | None:
    query = select(blobs.c.data).where(blobs.c.team_id == team_id, blobs.c.id == blob_id)
    row = (await tx.conn.execute(query)).first()
    return bytes(row.data) if row else None


async def record_event(
    tx: Tx,
    email: Email,
    event_type: EventType,
    data: dict[str, Any],
    now: int,
    *,
    status: EmailStatus | None = None,
) -> tuple[EmailStatus, Event]:
    """The one writer of email status: checks the status machine, stores status and event.

    By default the event's own type decides the new status (``email.sent`` → ``sent``). A
    per-recipient outcome of a multi-recipient email passes ``status``: the aggregate status it
    leads to (possibly unchanged). Raises ``InvalidTransition`` and writes nothing when the move
    is not allowed. The caller holds the row (``get_email(..., for_update=True)``).
    """
    [(new_status, event)] = await record_events(
        tx, [StatusEvent(email, event_type, data, status)], now
    )
    return new_status, event


async def reschedule(tx: Tx, email_id: str, scheduled_at: int | None) -> None:
    await tx.conn.execute(
        update(emails).where(emails.c.id == email_id).values(scheduled_at=scheduled_at)
    )


# --- batched forms, for the delivery worker (one statement per table for a batch of emails) ---


@dataclass(frozen=True)
class StatusEvent:
    """One event to record on an email; ``status`` as in ``record_event``."""

    email: Email
    event_type: EventType
    data: dict[str, Any]
    status: EmailStatus | None = None


@dataclass(frozen=True)
class DeliveryProgress:
    """The delivery worker's bookkeeping on one email, beside its status; None leaves a value
    as it is (each is None until first set: ``provider_message_id`` at the first ``sent``)."""

    attempts: int | None = None  # delivery attempts started
    raw_blob_id: str | None = None  # the exact bytes sent, kept at the first build
    provider_message_id: str | None = None


def _progress_columns(progress: DeliveryProgress) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    if progress.attempts is not None:
        columns["attempts"] = progress.attempts
    if progress.raw_blob_id is not None:
        columns["raw_blob_id"] = progress.raw_blob_id
    if progress.provider_message_id is not None:
        columns["provider_message_id"] = progress.provider_message_id
    return columns


async def record_events(
    tx: Tx,
    items: Sequence[StatusEvent],
    now: int,
    progress: Mapping[str, DeliveryProgress] | None = None,
) -> list[tuple[EmailStatus, Event]]:
    """``record_event`` for many events at once (several may name the same email, in order).

    Each move is checked against the status machine from the status the previous item left.
    ``progress`` ({email id: the worker's bookkeeping}) goes into the same UPDATE as the email's
    new status: every email row is written once (each row version costs an entry in every index
    of ``emails``). One UPDATE per shape of row change and one events INSERT. Raises
    ``InvalidTransition`` and writes nothing when any move is not allowed.
    """
    current: dict[str, EmailStatus] = {}
    final: dict[str, dict[str, Any]] = {}
    results: list[tuple[EmailStatus, Event]] = []
    for item in items:
        email = item.email
        before = current.get(email.id, email.status)
        new_status = _next_status(before, item.event_type, item.status)
        current[email.id] = new_status
        event = Event(new_id(), email.team_id, item.event_type, email.id, now, item.data)
        results.append((new_status, event))
        values: dict[str, Any] = final.setdefault(email.id, {})
        values.update(status=new_status.value, last_event=item.event_type)
        if item.event_type == EventType.EMAIL_SENT:
            values["sent_at"] = now
    for email_id, bookkeeping in (progress or {}).items():
        final.setdefault(email_id, {}).update(_progress_columns(bookkeeping))
    await _write_rows(tx, final)
    await events_repo.insert_events(tx, [event for _, event in results])
    return results


async def _write_rows(tx: Tx, rows: Mapping[str, Mapping[str, Any]]) -> None:
    """{email id: {column: value}}: one UPDATE per set of columns."""
    changes = [{"id": email_id, **dict(sorted(v.items()))} for email_id, v in rows.items() if v]
    await bulk.update_rows(tx, emails, ["id"], changes)


def _next_status(current: EmailStatus, event_type: str, status: EmailStatus | None) -> EmailStatus:
    if status is None:
        return apply_event(current, event_type)
    if status is current or can_move(current, status):
        return status
    raise InvalidTransition(current, event_type)


# The worker's reads of a batch, built once per dialect (and locking) and kept: building a
# statement of the email's ~40 columns and its cache key cost more CPU than running it, and a
# lone email's batch runs each of them (``storage/dialects.among_param``).


@functools.cache
def _emails_by_id(dialect: Dialect, for_update: bool, skip_locked: bool) -> Select[Any]:
    query = (
        select(*_EMAIL_COLUMNS)
        .where(dialect.among_param(emails.c.id, "email_ids"))
        .order_by(emails.c.id)
    )
    return query.with_for_update(skip_locked=skip_locked) if for_update else query


async def get_emails_any_team(
    tx: Tx, email_ids: Sequence[str], *, for_update: bool = False, skip_locked: bool = False
) -> dict[str, Email]:
    """For workers: the emails of a batch of jobs, locked in id order (no deadlocks); with
    ``skip_locked``, those another transaction has locked are left out, not waited for."""
    if not email_ids:
        return {}
    query = _emails_by_id(tx.dialect, for_update, skip_locked)
    found = map(_email, await tx.rows(query, {"email_ids": sorted(set(email_ids))}))
    return {email.id: email for email in found}


_SUMMARY_COLUMNS = tuple(emails.c[f.name] for f in fields(EmailSummary))


async def email_summaries(
    tx: Tx, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], EmailSummary]:
    """The emails named by ``(team id, email id)`` that exist, without their content."""
    if not keys:
        return {}
    teams, ids = sorted({team for team, _ in keys}), sorted({email for _, email in keys})
    query = select(*_SUMMARY_COLUMNS).where(
        among(tx, emails.c.team_id, teams), among(tx, emails.c.id, ids)
    )
    found = {}
    for row in await tx.conn.execute(query):
        summary = EmailSummary(*row)
        found[(summary.team_id, summary.id)] = summary
    return found


@functools.cache
def _outcomes(dialect: Dialect) -> Select[Any]:
    r = email_recipients
    return select(r.c.email_id, r.c.address, r.c.outcome).where(
        dialect.among_param(r.c.email_id, "email_ids")
    )


async def recipient_outcomes_many(tx: Tx, email_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {email_id: {} for email_id in email_ids}
    if not email_ids:
        return found
    for email_id, address, outcome in await tx.rows(
        _outcomes(tx.dialect), {"email_ids": list(email_ids)}
    ):
        found[email_id][address] = outcome
    return found


@functools.cache
def _outcomes_and_suppressions(dialect: Dialect) -> Select[Any]:
    r, s = email_recipients, suppressions
    return (
        select(r.c.email_id, r.c.address, r.c.outcome, s.c.id)
        .select_from(r.outerjoin(s, (s.c.team_id == r.c.team_id) & (s.c.email == r.c.address)))
        .where(dialect.among_param(r.c.email_id, "email_ids"))
    )


async def outcomes_and_suppressions(
    tx: Tx, email_ids: Sequence[str]
) -> tuple[dict[str, dict[str, str]], dict[str, set[str]]]:
    """``recipient_outcomes_many``, and which of each email's recipients are on its team's
    suppression list now ({email id: addresses}, only emails that have some).

    One statement: the list is joined on (team, address), both in lookup form as the send
    path's ``suppressions.find_listed`` compares them, through the list's unique index."""
    found: dict[str, dict[str, str]] = {email_id: {} for email_id in email_ids}
    listed: dict[str, set[str]] = {}
    if not email_ids:
        return found, listed
    query = _outcomes_and_suppressions(tx.dialect)
    for email_id, address, outcome, suppression_id in await tx.rows(
        query, {"email_ids": list(email_ids)}
    ):
        found[email_id][address] = outcome
        if suppression_id is not None:
            listed.setdefault(email_id, set()).add(address)
    return found, listed


async def set_recipient_outcomes(tx: Tx, rows: Sequence[tuple[str, str, str]]) -> None:
    """(email id, address, outcome) triples, in one statement."""
    changes = [{"email_id": e, "address": a, "outcome": o} for e, a, o in rows]
    await bulk.update_rows(tx, email_recipients, ["email_id", "address"], changes)


async def store_raws(
    tx: Tx,
    items: Sequence[tuple[Email, bytes]],
    now: int,
    also: Sequence[bulk.TableRows] = (),
) -> dict[str, str]:
    """Keep the exact bytes sent of many emails in one statement (a large one on PostgreSQL in
    pieces before it, ``storage.blobs``), with ``also``'s rows (the batch's attempts: one round
    trip for both); {email id: blob id}, for the caller to write as ``raw_blob_id`` with the
    email's next update (``record_events``)."""
    if not items:
        await bulk.insert_tables(tx, also)
        return {}
    rows = [(email, new_id(), raw) for email, raw in items]

    async def statement(blob_rows: list[dict[str, Any]]) -> None:
        await bulk.insert_tables(tx, [(blobs, blob_rows), *also])

    await blobs_repo.store_blobs_with(
        tx,
        [{"id": b, "team_id": e.team_id, "data": raw, "created_at": now} for e, b, raw in rows],
        statement,
    )
    return {e.id: b for e, b, _ in rows}


_ATTACHMENT_COLUMNS = tuple(
    attachments.c[name]
    for name in ("id", "email_id", "filename", "content_type", "size", "content_id", "blob_id")
)


@functools.cache
def _attachments(dialect: Dialect) -> Select[Any]:
    return (
        select(*_ATTACHMENT_COLUMNS)
        .where(dialect.among_param(attachments.c.email_id, "email_ids"))
        .order_by(attachments.c.email_id, attachments.c.position)
    )


async def attachments_of(tx: Tx, email_ids: Sequence[str]) -> dict[str, list[AttachmentInfo]]:
    """The attachments of many emails, in position order."""
    found: dict[str, list[AttachmentInfo]] = {email_id: [] for email_id in email_ids}
    if not email_ids:
        return found
    for row in await tx.rows(_attachments(tx.dialect), {"email_ids": list(email_ids)}):
        found[row[1]].append(AttachmentInfo(*row))
    return found


@functools.cache
def _blobs(dialect: Dialect) -> Select[Any]:
    return select(blobs.c.id, blobs.c.data).where(dialect.among_param(blobs.c.id, "blob_ids"))


async def read_blobs(tx: Tx, blob_ids: Sequence[str]) -> dict[str, bytes]:
    if not blob_ids:
        return {}
    rows = await tx.rows(_blobs(tx.dialect), {"blob_ids": list(blob_ids)})
    return {blob_id: bytes(data) for blob_id, data in rows}
