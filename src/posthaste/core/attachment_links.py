"""Signed, expiring download links for attachments: ``<public url>/attachments/<token>`` (and
``/received-attachments/<token>`` for those of received mail).

Resend answers an attachment's JSON record with a ``download_url`` anyone holding it may fetch
until ``expires_at``. The token names the team, the attachment and the expiry (none of them
secret: ids are not credentials) and carries a MAC under the service's secret key, so a link
cannot be made up or stretched; it needs no row and no key to check.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from posthaste.core.crypto import Keys, TokenSigner
from posthaste.core.models import AttachmentInfo

LINK_PURPOSE = "attachment-link"
RECEIVED_LINK_PURPOSE = "received-attachment-link"
RAW_LINK_PURPOSE = "received-raw-link"  # names a received email instead of an attachment
LINK_TTL_MS = 60 * 60 * 1000  # an hour, as long as a link in a page or a script needs
_LAYOUT = struct.Struct(">16s16sQ")  # team id, attachment id, expiry (ms since the epoch)


@dataclass(frozen=True)
class AttachmentLink:
    team_id: str
    attachment_id: str
    expires_at: int  # ms since the epoch


@dataclass(frozen=True)
class LinkedAttachment:
    """An attachment with a download link made for the caller who asked for it."""

    info: AttachmentInfo
    download_url: str
    expires_at: int  # ms since the epoch


class AttachmentLinks:
    """Makes and reads the download links of one service (its secret key and public URL)."""

    def __init__(
        self,
        secret_key: Keys,
        public_url: str,
        ttl_ms: int = LINK_TTL_MS,
        *,
        purpose: str = LINK_PURPOSE,
        path: str = "attachments",
    ) -> None:
        """``purpose`` keeps the links of one kind of attachment (sent, received) from naming
        the other; ``path`` is where the public route serves them."""
        self._signer = TokenSigner(secret_key, purpose)
        self._base = f"{public_url.rstrip('/')}/{path}"
        self.ttl_ms = ttl_ms

    def link(self, team_id: str, attachment_id: str, now: int) -> tuple[str, int]:
        """The download URL of an attachment, and when it expires (ms)."""
        expires_at = now + self.ttl_ms
        payload = _LAYOUT.pack(uuid.UUID(team_id).bytes, uuid.UUID(attachment_id).bytes, expires_at)
        return f"{self._base}/{self._signer.sign(payload)}", expires_at

    def attach(self, info: AttachmentInfo, team_id: str, now: int) -> LinkedAttachment:
        return LinkedAttachment(info, *self.link(team_id, info.id, now))

    def read(self, token: str) -> AttachmentLink | None:
        """What a genuine token names (expired or not), else None (never raises on junk)."""
        payload = self._signer.verify(token)
        if payload is None or len(payload) != _LAYOUT.size:
            return None
        team, attachment, expires_at = _LAYOUT.unpack(payload)
        team_id, attachment_id = str(uuid.UUID(bytes=team)), str(uuid.UUID(bytes=attachment))
        return AttachmentLink(team_id, attachment_id, expires_at)
