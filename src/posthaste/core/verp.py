"""VERP return paths: ``bounces+<token>@send.<domain>``, where the token names the email.

The token is the email id (a UUID, 16 raw bytes) and a 9-byte MAC, base32 lower-case without
padding: 40 characters, so the local part is 48 (≤ 64, RFC 5321), case-insensitive (some
servers lower-case local parts) and unforgeable: a bounce for a made-up id is recognised as
junk. ``read_verp`` turns the address a DSN was sent to back into the email id.
"""

from __future__ import annotations

import base64
import binascii
import uuid

from posthaste.core.crypto import Keys, TokenSigner

VERP_PURPOSE = "verp"
VERP_MAC_BYTES = 9
_PREFIX = "bounces+"


def verp_signer(secret_key: Keys) -> TokenSigner:
    return TokenSigner(secret_key, VERP_PURPOSE, mac_bytes=VERP_MAC_BYTES)


def verp_address(signer: TokenSigner, email_id: str, domain: str) -> str:
    """The return path of an email sent from ``domain`` (A-label)."""
    payload = uuid.UUID(email_id).bytes
    token = base64.b32encode(payload + signer.digest(payload)).decode("ascii")
    return f"{_PREFIX}{token.rstrip('=').lower()}@send.{domain.lower()}"


def read_verp(signer: TokenSigner, address: str) -> str | None:
    """The email id in a genuine VERP address, else None (never raises on junk)."""
    local = address.rpartition("@")[0].lower()
    if not local.startswith(_PREFIX):
        return None
    token = local[len(_PREFIX) :].upper()
    try:
        raw = base64.b32decode(token + "=" * (-len(token) % 8))
    except (binascii.Error, ValueError):
        return None
    payload, mac = raw[:16], raw[16:]
    if len(payload) != 16 or not signer.matches(payload, mac):
        return None
    return str(uuid.UUID(bytes=payload))
