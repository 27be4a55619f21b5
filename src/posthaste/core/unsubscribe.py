"""Unsubscribe tokens and the RFC 2369 / RFC 8058 header fields of broadcast-stream mail.

A token names who unsubscribes, in one of two ways, as lower-case base32 without padding:

- **A contact** (a broadcast's member): its id (16 bytes) and a 10-byte MAC, under the
  service's secret key, of the contact's team and id: 42 characters.
- **An email** (any other mail on a broadcast stream: ``POST /emails``, batch, relay): a kind
  byte, the email's id and a 10-byte MAC (its own key) of the email's team and id: 44
  characters. Such an email has exactly one recipient, so the token names that address of
  that team; unsubscribing makes (or marks) the team's contact for it ``unsubscribed``.

The MAC covers the team, so a token is good for that one contact or email of that one team: it
cannot be made up, and changing any character gives another id with a MAC that does not match.
It needs no row to check beyond the contact or email itself, and stays valid as long as that
row exists (a link in an old message keeps working, as RFC 8058 asks).

The same token is the local part's tail of the ``mailto:`` address,
``unsubscribe+<token>@send.<domain>`` (at most 56 characters, within RFC 5321's 64, and
case-insensitive like VERP addresses): the inbound server reads it back with ``read_token``.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from posthaste.core.crypto import Keys, TokenSigner

UNSUBSCRIBE_PURPOSE = "unsubscribe"
EMAIL_PURPOSE = "unsubscribe/email"
MAC_BYTES = 10
MAILTO_PREFIX = "unsubscribe+"
ONE_CLICK = "List-Unsubscribe=One-Click"
LIST_UNSUBSCRIBE = "List-Unsubscribe"
LIST_UNSUBSCRIBE_POST = "List-Unsubscribe-Post"
_EMAIL_KIND = b"\x01"  # the first byte of an email's token (a contact's has no kind byte)
_OWN_FIELD = re.compile(rb"(?im)^list-unsubscribe[ \t]*:")


class TokenKind(Enum):
    CONTACT = "contact"
    EMAIL = "email"


@dataclass(frozen=True)
class UnsubscribeToken:
    """A token read from a link or address: what it names (a contact or an email, by id) and
    its MAC, to check against that row's team once the row is found."""

    kind: TokenKind
    subject_id: str
    mac: bytes


class UnsubscribeLinks:
    """Makes and checks the unsubscribe links of one service (its secret key and public URL)."""

    def __init__(self, secret_key: Keys, public_url: str) -> None:
        self._signers = {
            TokenKind.CONTACT: TokenSigner(secret_key, UNSUBSCRIBE_PURPOSE, mac_bytes=MAC_BYTES),
            TokenKind.EMAIL: TokenSigner(secret_key, EMAIL_PURPOSE, mac_bytes=MAC_BYTES),
        }
        self._base = public_url.rstrip("/")

    def token(self, team_id: str, contact_id: str) -> str:
        """A broadcast member's token: it names the contact."""
        return self._token(TokenKind.CONTACT, team_id, contact_id)

    def email_token(self, team_id: str, email_id: str) -> str:
        """The token of a one-recipient email on a broadcast stream: it names the email."""
        return self._token(TokenKind.EMAIL, team_id, email_id)

    def _token(self, kind: TokenKind, team_id: str, subject_id: str) -> str:
        subject = _uuid_bytes(subject_id)
        mac = self._signers[kind].digest(_uuid_bytes(team_id) + subject)
        prefix = _EMAIL_KIND if kind is TokenKind.EMAIL else b""
        return _b32(prefix + subject + mac)

    def url_of(self, token: str) -> str:
        return f"{self._base}/unsubscribe/{token}"

    def headers(self, token: str, from_domain: str) -> dict[str, str]:
        """``List-Unsubscribe`` (the https link, then the mailto address) and
        ``List-Unsubscribe-Post`` (one click: RFC 8058) for what ``token`` names."""
        return {
            LIST_UNSUBSCRIBE: f"<{self.url_of(token)}>, <mailto:{mailto_of(token, from_domain)}>",
            LIST_UNSUBSCRIBE_POST: ONE_CLICK,
        }

    def genuine(self, token: UnsubscribeToken, team_id: str) -> bool:
        """Whether ``token``'s MAC is the one made for its contact or email in ``team_id``."""
        signer = self._signers[token.kind]
        subject = uuid.UUID(team_id).bytes + uuid.UUID(token.subject_id).bytes
        return signer.matches(subject, token.mac)


_B32_LETTERS = "abcdefghijklmnopqrstuvwxyz234567"
_B32_PAIRS = [a + b for a in _B32_LETTERS for b in _B32_LETTERS]  # ten bits each


def _b32(data: bytes) -> str:
    """``data`` in lower-case base32 without padding: ``base64.b32encode``'s letters, from one
    integer ten bits at a time (a third less CPU for a token; one per broadcast member)."""
    whole = -(-len(data) // 5) * 5  # padded with zero bytes to a multiple of 5 bytes (40 bits)
    number = int.from_bytes(data, "big") << (8 * (whole - len(data)))
    pairs = _B32_PAIRS
    text = "".join([pairs[(number >> shift) & 1023] for shift in range(whole * 8 - 10, -1, -10)])
    return text[: -(-len(data) * 8 // 5)]


def _uuid_bytes(text: str) -> bytes:
    """A UUID's 16 bytes; its canonical text (every id we store) without building a ``UUID``."""
    digits = text.replace("-", "")
    if len(digits) == 32 and digits.isalnum():
        try:
            return bytes.fromhex(digits)
        except ValueError:  # not hexadecimal: UUID() says so
            pass
    return uuid.UUID(text).bytes


def mailto_of(token: str, from_domain: str) -> str:
    """The address that unsubscribes by mail: on the bounce domain, whose MX is ours."""
    return f"{MAILTO_PREFIX}{token}@send.{from_domain.lower()}"


def read_token(text: str) -> UnsubscribeToken | None:
    """What a token (or a ``mailto`` local part) names, and its MAC, else None; the MAC is
    checked by ``UnsubscribeLinks.genuine`` against the team of the row it names."""
    lowered = text.lower()
    if lowered.startswith(MAILTO_PREFIX):
        lowered = lowered[len(MAILTO_PREFIX) :]
    if not lowered.isascii() or not lowered.isalnum() or len(lowered) > 64:
        return None
    try:
        raw = base64.b32decode(lowered.upper() + "=" * (-len(lowered) % 8))
    except (binascii.Error, ValueError):
        return None
    canonical = base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if canonical != lowered:  # no second spelling of a token
        return None
    if len(raw) == 16 + MAC_BYTES:
        return UnsubscribeToken(TokenKind.CONTACT, str(uuid.UUID(bytes=raw[:16])), raw[16:])
    if len(raw) == 1 + 16 + MAC_BYTES and raw[:1] == _EMAIL_KIND:
        return UnsubscribeToken(TokenKind.EMAIL, str(uuid.UUID(bytes=raw[1:17])), raw[17:])
    return None


def has_own_list_unsubscribe(headers: Mapping[str, str], raw: bytes | None) -> bool:
    """Whether the sender gave the message its own ``List-Unsubscribe`` (in ``headers``, or in
    the header block of a kept submission): then it runs its own unsubscribe handling."""
    if LIST_UNSUBSCRIBE in headers or any(n.lower() == "list-unsubscribe" for n in headers):
        return True
    if raw is None:
        return False
    end = raw.find(b"\r\n\r\n")
    block = raw if end < 0 else raw[:end]
    return _OWN_FIELD.search(block) is not None


def header_lines(fields: Mapping[str, str]) -> bytes:
    """The fields as header lines to put on top of a kept submission, a long
    ``List-Unsubscribe`` folded between its two URIs (each line well under 998 octets)."""
    folded = ((name, value.replace(">, <", ">,\r\n <")) for name, value in fields.items())
    return "".join(f"{name}: {value}\r\n" for name, value in folded).encode("ascii")
