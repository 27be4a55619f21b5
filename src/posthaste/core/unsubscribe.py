"""Unsubscribe tokens and the RFC 2369 / RFC 8058 header fields of broadcast mail.

A token names one contact: its id (16 bytes) and a 10-byte MAC, under the service's secret key,
of the contact's team and id, as lower-case base32 without padding (42 characters). The MAC
covers the team, so a token is good for that one contact of that one team: it cannot be made
up, and changing any character makes it another contact's id with a MAC that does not match.
It needs no row to check beyond the contact itself, and stays valid as long as the contact
exists (a link in an old message keeps working, as RFC 8058 asks).

The same token is the local part's tail of the ``mailto:`` address,
``unsubscribe+<token>@send.<domain>`` (54 characters, within RFC 5321's 64, and
case-insensitive like VERP addresses): the inbound server reads it back with ``read_token``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import uuid
from dataclasses import dataclass

from posthaste.core.crypto import TokenSigner

UNSUBSCRIBE_PURPOSE = "unsubscribe"
MAC_BYTES = 10
MAILTO_PREFIX = "unsubscribe+"
ONE_CLICK = "List-Unsubscribe=One-Click"


@dataclass(frozen=True)
class UnsubscribeToken:
    """A token read from a link or address: the contact it names, and its MAC to check
    against the contact's team once the contact is found."""

    contact_id: str
    mac: bytes


class UnsubscribeLinks:
    """Makes and checks the unsubscribe links of one service (its secret key and public URL)."""

    def __init__(self, secret_key: str, public_url: str) -> None:
        self._signer = TokenSigner(secret_key, UNSUBSCRIBE_PURPOSE, mac_bytes=MAC_BYTES)
        self._base = public_url.rstrip("/")

    def token(self, team_id: str, contact_id: str) -> str:
        contact = uuid.UUID(contact_id).bytes
        raw = contact + self._signer.digest(uuid.UUID(team_id).bytes + contact)
        return base64.b32encode(raw).decode("ascii").rstrip("=").lower()

    def url_of(self, token: str) -> str:
        return f"{self._base}/unsubscribe/{token}"

    def headers(self, token: str, from_domain: str) -> dict[str, str]:
        """``List-Unsubscribe`` (the https link, then the mailto address) and
        ``List-Unsubscribe-Post`` (one click: RFC 8058) for the contact of ``token``."""
        mailto = f"{MAILTO_PREFIX}{token}@send.{from_domain.lower()}"
        return {
            "List-Unsubscribe": f"<{self.url_of(token)}>, <mailto:{mailto}>",
            "List-Unsubscribe-Post": ONE_CLICK,
        }

    def genuine(self, token: UnsubscribeToken, team_id: str) -> bool:
        """Whether ``token``'s MAC is the one made for its contact in ``team_id``."""
        expected = self._signer.digest(uuid.UUID(team_id).bytes + uuid.UUID(token.contact_id).bytes)
        return hmac.compare_digest(expected, token.mac)


def read_token(text: str) -> UnsubscribeToken | None:
    """The contact id and MAC in a token (or a ``mailto`` local part), else None; the MAC is
    checked by ``UnsubscribeLinks.genuine`` against the contact's team."""
    lowered = text.lower()
    if lowered.startswith(MAILTO_PREFIX):
        lowered = lowered[len(MAILTO_PREFIX) :]
    if not lowered.isascii() or not lowered.isalnum():
        return None
    try:
        raw = base64.b32decode(lowered.upper() + "=" * (-len(lowered) % 8))
    except (binascii.Error, ValueError):
        return None
    canonical = base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if len(raw) != 16 + MAC_BYTES or canonical != lowered:  # no second spelling of a token
        return None
    return UnsubscribeToken(str(uuid.UUID(bytes=raw[:16])), raw[16:])
