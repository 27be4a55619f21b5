"""Receiving mail (PRODUCT §10): who may be mailed here, and storing what arrives.

``route`` decides each RCPT: an address at a domain whose owner has receiving on and its MX
record verified, a genuine, unexpired VERP address (``bounces+<token>@send.<domain>``) of
an email sent from ``<domain>``, or a genuine unsubscribe address
(``unsubscribe+<token>@send.<domain>``, RFC 2369) of mail sent from ``<domain>``; anything else
is refused (never an open relay). ``receive`` handles a message before the server answers 250:
received mail becomes a ``received_email`` with ``email.received`` (once per team it is for, in
one transaction each); a message to a VERP address is classified (``core.reports``), applied to
its email (``services.reports``) and kept for inspection, never listed as received mail; a
message to an unsubscribe address unsubscribes the person its token names
(``services.unsubscribe``, committed before the 250) and is not kept at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from posthaste.core.attachment_links import AttachmentLinks, LinkedAttachment
from posthaste.core.crypto import TokenSigner
from posthaste.core.cursors import PageRequest, Position, page_of
from posthaste.core.events import EventType
from posthaste.core.ids import format_ms, new_id, now_ms
from posthaste.core.inbound import (
    Arrival,
    InboundMessage,
    Mailbox,
    ReceivedAttachment,
    ReceivedEmail,
    attachment_content,
    attachment_filename,
    lookup_key,
    read_inbound,
)
from posthaste.core.mail_auth import TEMPERROR, Authentication, results_field, without_ours
from posthaste.core.models import AttachmentInfo, Event, Principal
from posthaste.core.reports import Report, classify_report
from posthaste.core.unsubscribe import MAILTO_PREFIX
from posthaste.core.verp import read_verp
from posthaste.errors import NotFound
from posthaste.services.emails import Page, cursor_page
from posthaste.services.group_commit import GroupCommit
from posthaste.services.reports import apply_report
from posthaste.services.unsubscribe import UnsubscribeService
from posthaste.storage import emails as emails_repo
from posthaste.storage import inbound as repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.inbound import RECEIVED, ReceivedFilter, Stored
from posthaste.storage.tables import received_emails

log = logging.getLogger(__name__)

OFFLOAD_PARSE_BYTES = 256 * 1024  # bigger messages are parsed off the event loop
GROUP_WEIGHT = 64  # small messages per shared transaction (at most ~16 MiB of big ones)
GROUP_BYTES_PER_WEIGHT = 256 * 1024
ROUTE_CACHE_SECONDS = 5.0  # a domain's receiving team, remembered this long per process
_VERP_PREFIX = "bounces+"
_BOUNCE_LABEL = "send."


class Authenticator(Protocol):
    async def authenticate(self, arrival: Arrival) -> Authentication: ...


class NoAuthentication:
    """Records ``none`` for every method (tests and deployments that check elsewhere)."""

    async def authenticate(self, arrival: Arrival) -> Authentication:
        return Authentication()


@dataclass
class _RouteCache:
    """{domain: (team or None, expiry)}: RCPT at 1,000 messages/s asks for a handful of names."""

    seconds: float = ROUTE_CACHE_SECONDS
    entries: dict[str, tuple[str | None, float]] = field(default_factory=dict)

    def get(self, name: str) -> tuple[str | None] | None:
        found = self.entries.get(name)
        if found is None or found[1] < time.monotonic():
            return None
        return (found[0],)

    def put(self, name: str, team_id: str | None) -> None:
        if len(self.entries) > 10_000:
            self.entries.clear()
        self.entries[name] = (team_id, time.monotonic() + self.seconds)


class InboundService:
    def __init__(
        self,
        db: Database,
        verp: TokenSigner,
        retention_days: int,
        unsubscribe: UnsubscribeService,
        authenticator: Authenticator | None = None,
        results_host: str = "posthaste",
    ) -> None:
        self.db = db
        self.verp = verp
        self.unsubscribe = unsubscribe
        self.retention_ms = retention_days * 86_400_000
        self.authenticator: Authenticator = authenticator or NoAuthentication()
        self.results_host = results_host
        self._routes = _RouteCache()
        self._group: GroupCommit[Stored, str] = GroupCommit(
            self._store_many, weight=_weight, max_weight=GROUP_WEIGHT
        )

    async def route(self, address: str) -> Mailbox | None:
        """Where mail for ``address`` goes, or None: refused."""
        key = lookup_key(address)
        local, _, domain = key.rpartition("@")
        if not local or not domain:
            return None
        if local.startswith(_VERP_PREFIX) and domain.startswith(_BOUNCE_LABEL):
            return await self._verp_mailbox(key, domain.removeprefix(_BOUNCE_LABEL))
        if local.startswith(MAILTO_PREFIX) and domain.startswith(_BOUNCE_LABEL):
            return await self._unsubscribe_mailbox(key, local, domain.removeprefix(_BOUNCE_LABEL))
        team_id = await self._receiving_team(domain)
        return None if team_id is None else Mailbox(team_id, key)

    async def _receiving_team(self, domain: str) -> str | None:
        cached = self._routes.get(domain)
        if cached is not None:
            return cached[0]
        async with self.db.read() as tx:
            team_id = await repo.receiving_team(tx, domain)
        self._routes.put(domain, team_id)
        return team_id

    async def _verp_mailbox(self, address: str, domain: str) -> Mailbox | None:
        """A genuine token, for an email younger than the retention period, sent from
        ``domain``: a forged, expired or misplaced token is refused."""
        email_id = read_verp(self.verp, address)
        if email_id is None or _age_ms(email_id) > self.retention_ms:
            return None
        async with self.db.read() as tx:
            email = (await emails_repo.get_emails_any_team(tx, [email_id])).get(email_id)
        if email is None or _from_domain(email.from_address) != domain:
            return None
        return Mailbox(email.team_id, address, email_id)

    async def _unsubscribe_mailbox(self, address: str, local: str, domain: str) -> Mailbox | None:
        """A genuine unsubscribe token, sent from ``domain``: a forged token, one for a contact
        or email that is gone, or one on another domain is refused."""
        team_id = await self.unsubscribe.mailbox_team(local, domain)
        return None if team_id is None else Mailbox(team_id, address, unsubscribe=local)

    async def receive(self, arrival: Arrival) -> list[str]:
        """Unsubscribe whom the message's unsubscribe addresses name, and store the message
        for every team it is for; the ids of what was stored."""
        for token in dict.fromkeys(m.unsubscribe for m in arrival.mailboxes if m.unsubscribe):
            await self._unsubscribed(token)
        if all(m.unsubscribe for m in arrival.mailboxes):
            return []
        authentication = await self._authenticate(arrival)
        # Our field on top of the message as it arrived, less any forged one of ours, kept as
        # two parts and never joined: the message is held once (a forged field costs a copy).
        raw = Kept(
            results_field(self.results_host, authentication),
            without_ours(arrival.raw, self.results_host),
        )
        arrival = dataclasses.replace(arrival, raw=raw.message)
        stored: list[str] = []
        mail = [m for m in arrival.mailboxes if m.email_id is None and m.unsubscribe is None]
        for team_id in dict.fromkeys(m.team_id for m in mail):
            mine = [m.address for m in mail if m.team_id == team_id]
            stored.append(await self._store_received(team_id, arrival, mine, raw, authentication))
        reports = [m for m in arrival.mailboxes if m.email_id is not None]
        if reports:
            report = classify_report(raw.message)
            for email_id in dict.fromkeys(m.email_id for m in reports if m.email_id):
                same = [m for m in reports if m.email_id == email_id]
                stored.append(await self._store_report(same, arrival, raw, report))
        return stored

    async def _unsubscribed(self, token: str) -> None:
        """Unsubscribe (idempotent); a contact or email deleted since RCPT leaves no one to
        unsubscribe, and the message is taken all the same."""
        try:
            await self.unsubscribe.unsubscribe(token)
        except NotFound:
            log.info("inbound: an unsubscribe address named no one by the time of DATA")

    async def _authenticate(self, arrival: Arrival) -> Authentication:
        """The checks' results; a check that breaks is a ``temperror``, never lost mail."""
        try:
            return await self.authenticator.authenticate(arrival)
        except Exception:
            log.exception("inbound: checking a message's authentication failed")
            return Authentication(spf=TEMPERROR, dkim=TEMPERROR, dmarc=TEMPERROR)

    async def _store_received(
        self,
        team_id: str,
        arrival: Arrival,
        received_for: list[str],
        raw: Kept,
        authentication: Authentication,
    ) -> str:
        parsed = await _read(raw, arrival.mail_from)
        item = _record(team_id, RECEIVED, None, arrival, parsed, raw, authentication, received_for)
        addresses = list(dict.fromkeys([*parsed.addresses, *received_for]))
        data = received_event_data(item)
        event = Event(new_id(), team_id, EventType.EMAIL_RECEIVED, None, item.created_at, data)
        return await self._group.submit(Stored(item, raw.parts, addresses, [event]))

    async def _store_many(self, stored: list[Stored]) -> list[str]:
        """One transaction for the messages of concurrent connections (``GroupCommit``)."""
        async with self.db.transaction() as tx:
            await repo.store_received(tx, stored)
        return [one.item.id for one in stored]

    async def _store_report(
        self, mailboxes: list[Mailbox], arrival: Arrival, raw: Kept, report: Report
    ) -> str:
        first = mailboxes[0]
        assert first.email_id is not None
        parsed = await _read(raw, arrival.mail_from)
        received_for = [m.address for m in mailboxes]
        item = _record(
            first.team_id,
            report.kind.value,
            first.email_id,
            arrival,
            parsed,
            raw,
            Authentication(),
            received_for,
        )
        async with self.db.transaction() as tx:
            await _apply(tx, first, report, item.created_at)
            await repo.store_received(tx, [Stored(item, raw.parts)])
        return item.id


async def _apply(tx: Tx, mailbox: Mailbox, report: Report, now: int) -> None:
    assert mailbox.email_id is not None
    email = await emails_repo.get_email(tx, mailbox.team_id, mailbox.email_id, for_update=True)
    if email is not None:
        await apply_report(tx, email, report, now)


def received_event_data(item: ReceivedEmail) -> dict[str, object]:
    """``email.received``'s data: the message's headline and its attachments' metadata."""
    return {
        "email_id": item.id,
        "from": item.from_address,
        "to": item.to,
        "subject": item.subject,
        "message_id": item.message_id,
        "created_at": format_ms(item.created_at),
        "attachments": [
            {
                "id": a.id,
                "filename": a.filename,
                "content_type": a.content_type,
                "size": a.size,
            }
            for a in item.attachments
        ],
    }


def _record(
    team_id: str,
    kind: str,
    email_id: str | None,
    arrival: Arrival,
    parsed: InboundMessage,
    raw: Kept,
    authentication: Authentication,
    received_for: list[str],
) -> ReceivedEmail:
    received_id = new_id()
    return ReceivedEmail(
        id=received_id,
        team_id=team_id,
        kind=kind,
        email_id=email_id,
        mail_from=arrival.mail_from,
        from_address=parsed.from_address,
        from_lookup=parsed.from_lookup,
        to=parsed.to or received_for,
        cc=parsed.cc,
        reply_to=parsed.reply_to,
        received_for=received_for,
        subject=parsed.subject,
        html=parsed.html,
        text=parsed.text,
        headers=parsed.headers,
        message_id=parsed.message_id,
        authentication=authentication.as_dict(),
        raw_blob_id=new_id(),
        size=raw.size,
        created_at=now_ms(),
        attachments=[
            ReceivedAttachment(
                id=new_id(),
                email_id=received_id,
                position=position,
                part=a.part,
                filename=attachment_filename(a, position),
                content_type=a.content_type,
                size=a.size,
                content_id=a.content_id,
                disposition=a.disposition,
            )
            for position, a in enumerate(parsed.attachments)
        ],
    )


@dataclass(frozen=True)
class Kept:
    """The message we keep: our ``Authentication-Results`` field on top of the message."""

    results: bytes
    message: bytes

    @property
    def parts(self) -> tuple[bytes, bytes]:
        return (self.results, self.message)

    @property
    def size(self) -> int:
        return len(self.results) + len(self.message)


async def _read(raw: Kept, mail_from: str) -> InboundMessage:
    if raw.size > OFFLOAD_PARSE_BYTES:
        return await asyncio.to_thread(read_inbound, raw.message, mail_from, raw.results)
    return read_inbound(raw.message, mail_from, raw.results)


def _weight(stored: Stored) -> int:
    """A small message weighs 1; a big one its share of a group's bytes."""
    return max(1, sum(map(len, stored.raw)) // GROUP_BYTES_PER_WEIGHT)


def _age_ms(email_id: str) -> int:
    """How old an email is, from its UUIDv7 id (its first 48 bits are its creation time)."""
    return now_ms() - int(uuid.UUID(email_id).hex[:12], 16)


def _from_domain(from_address: str) -> str:
    return lookup_key(from_address).rpartition("@")[2]


class ReceivedQueries:
    """Reading received mail back: the list, one message, its attachments and raw source."""

    def __init__(self, db: Database, links: AttachmentLinks, raw_links: AttachmentLinks) -> None:
        self.db = db
        self.links = links
        self.raw_links = raw_links

    def raw_link(self, item: ReceivedEmail) -> tuple[str, int]:
        """A signed link to the raw message (Resend's ``raw.download_url``) and its expiry."""
        return self.raw_links.link(item.team_id, item.id, now_ms())

    async def raw_download(self, token: str) -> bytes:
        """The raw message a signed link names, while the link holds."""
        link = self.raw_links.read(token)
        if link is None or link.expires_at <= now_ms():
            raise NotFound("This download link is not valid or has expired.")
        async with self.db.read() as tx:
            item = await _received(tx, link.team_id, link.attachment_id)
            data = await emails_repo.read_blob(tx, link.team_id, item.raw_blob_id)
        if data is None:
            raise NotFound("The raw message is no longer stored (retention).")
        return data

    async def get(self, principal: Principal, email_id: str) -> ReceivedEmail:
        async with self.db.read() as tx:
            return await _received(tx, principal.team_id, email_id)

    async def page(
        self,
        principal: Principal,
        flt: ReceivedFilter,
        cursor: str | None,
        limit: int,
        *,
        anchor: PageRequest | None = None,
    ) -> Page[ReceivedEmail]:
        team_id = principal.team_id

        async def fetch(
            tx: Tx, position: Position | None, n: int, backwards: bool
        ) -> list[ReceivedEmail]:
            return await repo.list_received(tx, team_id, flt, position, n, backwards=backwards)

        async with self.db.read() as tx:
            return await cursor_page(tx, received_emails, team_id, cursor, limit, anchor, fetch)

    async def attachments(
        self, principal: Principal, email_id: str, request: PageRequest | None = None
    ) -> tuple[list[LinkedAttachment], bool]:
        """The message's attachments in message order (a page when ``request`` asks), each
        with a signed download link, and whether more lie beyond the page."""
        item = await self.get(principal, email_id)
        infos = [attachment_info(a, item.raw_blob_id) for a in item.attachments]
        more = False
        if request is not None:
            infos, more = page_of(infos, request, lambda a: a.id, "email's attachments")
        now = now_ms()
        return [self.links.attach(info, principal.team_id, now) for info in infos], more

    async def attachment_details(
        self, principal: Principal, email_id: str, attachment_id: str
    ) -> LinkedAttachment:
        item = await self.get(principal, email_id)
        for attachment in item.attachments:
            if attachment.id == attachment_id.lower():
                info = attachment_info(attachment, item.raw_blob_id)
                return self.links.attach(info, principal.team_id, now_ms())
        raise _attachment_not_found(attachment_id, email_id)

    async def attachment(
        self, principal: Principal, email_id: str, attachment_id: str
    ) -> tuple[AttachmentInfo, bytes]:
        found = await self._content(principal.team_id, attachment_id, email_id)
        if found is None:
            raise _attachment_not_found(attachment_id, email_id)
        return found

    async def download(self, token: str) -> tuple[AttachmentInfo, bytes]:
        """The attachment a signed download link names, while the link holds."""
        link = self.links.read(token)
        if link is None or link.expires_at <= now_ms():
            raise NotFound("This download link is not valid or has expired.")
        found = await self._content(link.team_id, link.attachment_id)
        if found is None:
            raise NotFound("The attachment is no longer stored.")
        return found

    async def raw(self, principal: Principal, email_id: str) -> bytes:
        async with self.db.read() as tx:
            item = await _received(tx, principal.team_id, email_id)
            data = await emails_repo.read_blob(tx, principal.team_id, item.raw_blob_id)
        if data is None:
            raise NotFound("The raw message is no longer stored (retention).")
        return data

    async def _content(
        self, team_id: str, attachment_id: str, email_id: str | None = None
    ) -> tuple[AttachmentInfo, bytes] | None:
        """The attachment's bytes, read from the raw message that holds them."""
        async with self.db.read() as tx:
            found = await repo.find_attachment(tx, team_id, attachment_id)
            if found is None or (email_id is not None and found[0].email_id != email_id.lower()):
                return None
            attachment, blob_id = found
            raw = await emails_repo.read_blob(tx, team_id, blob_id)
        if raw is None:
            return None
        if len(raw) > OFFLOAD_PARSE_BYTES:
            data = await asyncio.to_thread(attachment_content, raw, attachment.part)
        else:
            data = attachment_content(raw, attachment.part)
        return None if data is None else (attachment_info(attachment, blob_id), data)


def attachment_info(item: ReceivedAttachment, blob_id: str) -> AttachmentInfo:
    """A received attachment in the shape the attachment endpoints share with sent mail."""
    return AttachmentInfo(
        item.id,
        item.email_id,
        item.filename,
        item.content_type,
        item.size,
        item.content_id,
        blob_id,
    )


async def _received(tx: Tx, team_id: str, email_id: str) -> ReceivedEmail:
    item = await repo.get_received(tx, team_id, email_id)
    if item is None:
        raise NotFound(f"Received email {email_id!r} was not found.")
    return item


def _attachment_not_found(attachment_id: str, email_id: str) -> NotFound:
    return NotFound(f"Attachment {attachment_id!r} of received email {email_id!r} was not found.")
