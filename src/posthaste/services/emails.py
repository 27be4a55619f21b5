"""Reading emails back, and the two changes a caller may make: reschedule and cancel."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from posthaste.core.attachment_links import AttachmentLinks, LinkedAttachment
from posthaste.core.cursors import (
    InvalidCursor,
    PageRequest,
    Position,
    decode_cursor,
    encode_cursor,
    page_of,
)
from posthaste.core.ids import format_ms, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import AttachmentInfo, Email, Event, Principal
from posthaste.core.send_request import MAX_SCHEDULE_AHEAD_MS
from posthaste.core.serialize import email_event_data
from posthaste.core.status import EmailStatus, InvalidTransition, event_for
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.storage import emails as repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.emails import EmailFilter
from posthaste.storage.keyset import ListTable, cut, position_of
from posthaste.storage.tables import emails

PENDING = (EmailStatus.QUEUED, EmailStatus.SCHEDULED)


class Dated(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def created_at(self) -> int: ...


T = TypeVar("T", bound=Dated)


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str
    has_more: bool  # Resend's: more items lie past the page in its direction


Fetch = Callable[[Tx, Position | None, int, bool], Awaitable[list[T]]]


async def cursor_page(
    tx: Tx,
    table: ListTable,
    team_id: str,
    cursor: str | None,
    limit: int,
    anchor: PageRequest | None,
    fetch: Fetch[T],
) -> Page[T]:
    """A page of a newest-first list (``GET /emails`` and its kind): after our ``cursor``, or
    after (before) Resend's item id; ``fetch(tx, position, n, backwards)`` reads the rows."""
    if cursor and anchor is not None:
        raise ValidationError(f"Give 'cursor' or an email id in '{anchor.name}', not both.")
    backwards = anchor is not None and anchor.backwards
    if anchor is not None and anchor.anchor is not None:
        position = await position_of(tx, table, team_id, anchor.anchor)
        if position is None:
            raise ValidationError(
                f"'{anchor.name}' must be an RFC 3339 timestamp or the id of one of your emails."
            )
    else:
        position = decode_page_cursor(cursor)
    rows = await fetch(tx, position, limit + 1, backwards)
    items, more = cut(rows, limit, backwards=backwards)
    # next_cursor always leads on to older items: past a `before` page lies its anchor
    follows = (more or backwards) and bool(items)
    next_cursor = encode_cursor(Position(items[-1].created_at, items[-1].id)) if follows else ""
    return Page(items, next_cursor, more)


def decode_page_cursor(cursor: str | None) -> Position | None:
    if not cursor:
        return None
    try:
        return decode_cursor(cursor)
    except InvalidCursor:
        raise ValidationError(
            "The 'cursor' is invalid: pass the next_cursor of a previous page."
        ) from None


class EmailQueries:
    def __init__(self, db: Database, links: AttachmentLinks) -> None:
        self.db = db
        self.links = links

    async def get(self, principal: Principal, email_id: str) -> Email:
        async with self.db.read() as tx:
            return await _email(tx, principal, email_id)

    async def page(
        self,
        principal: Principal,
        flt: EmailFilter,
        cursor: str | None,
        limit: int,
        *,
        anchor: PageRequest | None = None,
    ) -> Page[Email]:
        """A page newest first, after our ``cursor`` or after (before) Resend's email id."""
        team_id = principal.team_id

        async def fetch(tx: Tx, position: Position | None, n: int, backwards: bool) -> list[Email]:
            return await repo.list_emails(tx, team_id, flt, position, n, backwards=backwards)

        async with self.db.read() as tx:
            return await cursor_page(tx, emails, team_id, cursor, limit, anchor, fetch)

    async def events(self, principal: Principal, email_id: str) -> list[Event]:
        async with self.db.read() as tx:
            await _email(tx, principal, email_id)
            return await repo.list_events(tx, principal.team_id, email_id)

    async def attachments(
        self, principal: Principal, email_id: str, request: PageRequest | None = None
    ) -> tuple[list[LinkedAttachment], bool]:
        """The email's attachments in message order (a page of them when ``request`` asks),
        each with a download link, and whether more lie beyond the page."""
        async with self.db.read() as tx:
            await _email(tx, principal, email_id)
            items = await repo.list_attachments(tx, principal.team_id, email_id)
        more = False
        if request is not None:
            items, more = page_of(items, request, lambda a: a.id, "email's attachments")
        now = now_ms()
        return [self.links.attach(a, principal.team_id, now) for a in items], more

    async def attachment_details(
        self, principal: Principal, email_id: str, attachment_id: str
    ) -> LinkedAttachment:
        async with self.db.read() as tx:
            info = await repo.find_attachment(tx, principal.team_id, attachment_id, email_id)
        if info is None:
            raise _attachment_not_found(attachment_id, email_id)
        return self.links.attach(info, principal.team_id, now_ms())

    async def attachment(
        self, principal: Principal, email_id: str, attachment_id: str
    ) -> tuple[AttachmentInfo, bytes]:
        async with self.db.read() as tx:
            found = await _attachment_data(tx, principal.team_id, attachment_id, email_id)
        if found is None:
            raise _attachment_not_found(attachment_id, email_id)
        return found

    async def download(self, token: str) -> tuple[AttachmentInfo, bytes]:
        """The attachment a signed download link names, while the link holds."""
        link = self.links.read(token)
        if link is None:
            raise NotFound("This download link is not valid.")
        if link.expires_at <= now_ms():
            raise NotFound(
                "This download link has expired: get a new one from "
                "GET /emails/{email_id}/attachments/{attachment_id} with Accept: application/json."
            )
        async with self.db.read() as tx:
            found = await _attachment_data(tx, link.team_id, link.attachment_id)
        if found is None:
            raise NotFound("The attachment is no longer stored.")
        return found

    async def raw(self, principal: Principal, email_id: str) -> bytes:
        async with self.db.read() as tx:
            email = await _email(tx, principal, email_id)
            if email.raw_blob_id is None:
                raise NotFound("The message has not been built yet: it exists once sending starts.")
            data = await repo.read_blob(tx, principal.team_id, email.raw_blob_id)
        if data is None:
            raise NotFound("The raw message is no longer stored (retention).")
        return data


def _attachment_not_found(attachment_id: str, email_id: str) -> NotFound:
    return NotFound(f"Attachment {attachment_id!r} of email {email_id!r} was not found.")


async def _attachment_data(
    tx: Tx, team_id: str, attachment_id: str, email_id: str | None = None
) -> tuple[AttachmentInfo, bytes] | None:
    info = await repo.find_attachment(tx, team_id, attachment_id, email_id)
    if info is None:
        return None
    data = await repo.read_blob(tx, team_id, info.blob_id)
    return None if data is None else (info, data)


class EmailChanges:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def reschedule(
        self, principal: Principal, email_id: str, scheduled_at: int | None
    ) -> Email:
        """Move a queued or scheduled email to a new time (None or past: send now)."""
        now = now_ms()
        if scheduled_at is not None and scheduled_at - now > MAX_SCHEDULE_AHEAD_MS:
            raise ValidationError("'scheduled_at' must be at most 30 days in the future.")
        when = scheduled_at if scheduled_at is not None and scheduled_at > now else None
        async with self.db.transaction() as tx:
            email = await _email(tx, principal, email_id, for_update=True)
            _require_pending(email, "rescheduled")
            target = EmailStatus.SCHEDULED if when is not None else EmailStatus.QUEUED
            await repo.reschedule(tx, email.id, when)
            if target is not email.status or target is EmailStatus.SCHEDULED:
                await _move(tx, email, target, now, scheduled_at=format_ms(when))
            await jobs_repo.move(
                tx, JobKind.DELIVER_EMAIL, email.id, when if when is not None else now
            )
            return await _email(tx, principal, email_id)

    async def cancel(self, principal: Principal, email_id: str) -> Email:
        now = now_ms()
        async with self.db.transaction() as tx:
            email = await _email(tx, principal, email_id, for_update=True)
            _require_pending(email, "canceled")
            await _move(tx, email, EmailStatus.CANCELED, now)
            await jobs_repo.drop(tx, JobKind.DELIVER_EMAIL, email.id)
            return await _email(tx, principal, email_id)


def _require_pending(email: Email, action: str) -> None:
    if email.status not in PENDING:
        raise Conflict(
            f"Only queued or scheduled emails can be {action}; this one is {email.status.value}."
        )


async def _move(tx: Tx, email: Email, target: EmailStatus, now: int, **extra: object) -> None:
    data = email_event_data(email, **{k: v for k, v in extra.items() if v is not None})
    try:
        await repo.record_event(tx, email, event_for(target), data, now)
    except InvalidTransition as exc:
        raise Conflict(str(exc)) from exc


async def _email(tx: Tx, principal: Principal, email_id: str, *, for_update: bool = False) -> Email:
    email = await repo.get_email(tx, principal.team_id, email_id, for_update=for_update)
    if email is None:
        raise NotFound(f"Email {email_id!r} was not found.")
    return email
