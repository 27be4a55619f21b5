"""Step 2 of a delivery batch (``services/delivery.py``): the exact bytes each started attempt
sends.

What a batch needs is read in one go (``read_sources``: the stored messages, and for the emails
still to build, their attachments and contents), then each message is built (or kept), tracked
(``core/tracking.py``) and DKIM-signed: the signature covers the rewritten html. A message we
signed already (a retry) goes again unchanged, so a retry sends (and ``/raw`` shows) exactly
what was sent the first time. Big messages are built, tracked and signed off the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import NamedTuple

from posthaste.core.dkim import DkimError, DkimKey, sign_message
from posthaste.core.ids import ms_to_datetime, now_ms
from posthaste.core.mime import OutgoingMessage, build_message
from posthaste.core.models import Attachment, AttachmentInfo, Email, Job
from posthaste.core.tracking import TrackingLinks, TrackingOptions
from posthaste.logs import EMAIL_ID, logged_with
from posthaste.services.delivery_rules import SenderFacts
from posthaste.storage import emails as repo
from posthaste.storage.database import Tx

log = logging.getLogger(__name__)

OFFLOAD_BUILD_BYTES = 256 * 1024  # bigger messages are built off the event loop (~20 ms/MiB)
# Bigger messages are tracked off the event loop: reading html costs ~0.3-0.5 ms per KiB
# (bench/README.md, tracking).
OFFLOAD_TRACK_BYTES = 16 * 1024


@dataclass(frozen=True)
class Attempt:
    """An email's delivery attempt, started (step 1): its job, the email as started, the
    attempt's number, and the recipients still waiting for an outcome."""

    job: Job
    email: Email
    number: int
    waiting: list[str]


class Sources(NamedTuple):
    """What step 2 reads of a batch: the stored messages (by blob id), and for the emails to
    build, their attachments and the attachments' contents (by blob id)."""

    stored: dict[str, bytes]
    infos: dict[str, list[AttachmentInfo]]
    contents: dict[str, bytes]


async def read_sources(tx: Tx, attempts: list[Attempt]) -> Sources:
    if not attempts:
        return Sources({}, {}, {})
    stored = await repo.read_blobs(
        tx, [a.email.raw_blob_id for a in attempts if a.email.raw_blob_id]
    )
    to_build = [a.email.id for a in attempts if a.email.raw_blob_id not in stored]
    infos = await repo.attachments_of(tx, to_build)
    contents = await repo.read_blobs(tx, [i.blob_id for items in infos.values() for i in items])
    return Sources(stored, infos, contents)


class Unsendable(Exception):
    """The message cannot be built or signed (bad key, impossible content): the email fails."""


class MessageMaker:
    """Builds, tracks and signs the messages of a batch's attempts."""

    def __init__(self, tracking: TrackingLinks | None) -> None:
        self.tracking = tracking

    async def messages(
        self, attempts: list[Attempt], senders: SenderFacts, sources: Sources
    ) -> dict[str, tuple[bytes, bool] | Unsendable]:
        """The exact bytes to send, and whether they are new (to store), by email id.

        Stored bytes are sent as they are once signed by us. A message kept from the SMTP
        relay is stored unsigned, so its first delivery tracks and signs it; REST mail is
        built here, then tracked and signed. Tracking is the sending domain's."""
        stored, infos, contents = sources
        messages: dict[str, tuple[bytes, bool] | Unsendable] = {}
        for attempt in attempts:
            email = attempt.email
            kept = stored.get(email.raw_blob_id) if email.raw_blob_id else None
            prepared: tuple[bytes, bool] | Unsendable
            with logged_with(EMAIL_ID, email.id):
                try:
                    prepared = await self._prepared(email, senders, kept, infos, contents)
                except (DkimError, ValueError) as exc:
                    # The same input fails the same way every time: the email cannot be sent.
                    log.exception("email %s: the message could not be built or signed", email.id)
                    prepared = Unsendable(f"{type(exc).__name__}: {exc}")
            messages[email.id] = prepared
        return messages

    async def _prepared(
        self,
        email: Email,
        senders: SenderFacts,
        kept: bytes | None,
        infos: dict[str, list[AttachmentInfo]],
        contents: dict[str, bytes],
    ) -> tuple[bytes, bool]:
        """Built (or kept), tracked, then signed: the signature covers the rewritten html.
        A stored message we signed already (a retry) goes again unchanged."""
        key = await senders.signing_key(email)
        if kept is not None and key is not None and _signed_with(kept, key):
            return kept, False
        raw = kept if kept is not None else await _build(email, infos[email.id], contents)
        tracked = await self._tracked(email, raw, await senders.tracking(email))
        if key is None:
            return tracked, kept is None or tracked is not kept
        if len(tracked) > OFFLOAD_BUILD_BYTES:
            return await asyncio.to_thread(sign_message, tracked, key, now_ms() // 1000), True
        return sign_message(tracked, key, now_ms() // 1000), True

    async def _tracked(self, email: Email, raw: bytes, tracking: TrackingOptions) -> bytes:
        """``raw`` with the domain's tracking; a failure to track sends the mail untracked."""
        if self.tracking is None or not tracking.on:
            return raw
        track = functools.partial(self.tracking.track_message, raw, email.team_id, email.id)
        try:
            if len(raw) > OFFLOAD_TRACK_BYTES:
                return await asyncio.to_thread(track, tracking)
            return track(tracking)
        except Exception:
            log.exception("email %s: tracking failed; it is sent untracked", email.id)
            return raw


async def _build(email: Email, infos: list[AttachmentInfo], contents: dict[str, bytes]) -> bytes:
    attachments = [
        Attachment(i.filename, i.content_type, contents.get(i.blob_id, b""), i.content_id)
        for i in infos
    ]
    message = _outgoing(email, attachments)
    if sum(len(a.content) for a in attachments) > OFFLOAD_BUILD_BYTES:
        return await asyncio.to_thread(build_message, message)
    return build_message(message)


def _signed_with(raw: bytes, key: DkimKey) -> bool:
    """Whether ``raw`` already starts with our signature by ``key`` (signed on an earlier try)."""
    if not raw.startswith(b"DKIM-Signature:"):
        return False
    first_field = raw.split(b"\r\n", 3)[:3]
    tags = b" ".join(first_field).replace(b" ", b"").replace(b"\t", b"")
    return f"d={key.domain};".encode() in tags and f"s={key.selector};".encode() in tags


def _outgoing(email: Email, attachments: list[Attachment]) -> OutgoingMessage:
    return OutgoingMessage(
        from_=email.from_address,
        to=email.to,
        cc=email.cc,
        reply_to=email.reply_to,
        subject=email.subject,
        html=email.html,
        text=email.text,
        headers=email.headers,
        attachments=attachments,
        message_id=email.message_id,
        date=ms_to_datetime(email.created_at),
    )
