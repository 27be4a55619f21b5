"""The dashboard's session cookie and the CSRF token of its forms, both keyed by the service's
secret key.

The cookie holds the API key the user signed in with and the time of sign-in, sealed with
AES-GCM (``SecretBox``): unreadable and unforgeable without the secret key. Each request opens
it and authenticates the key again (cached for seconds by the key service), so a revoked key
ends its sessions at once. The CSRF token is an HMAC of a random nonce sealed in the cookie:
one per session, nothing stored, and a page of another site, which can read neither the cookie
nor the dashboard's pages, cannot know it.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

import orjson

from posthaste.core.crypto import DecryptionError, Keys, SecretBox, TokenSigner

SESSION_COOKIE = "posthaste_session"
SIGN_IN_COOKIE = "posthaste_sign_in"  # the sign-in form's own CSRF token (no session yet)
SESSION_HOURS = 12
SESSION_MS = SESSION_HOURS * 3600 * 1000


@dataclass(frozen=True)
class Session:
    """An open session: the key it was opened with, and the token its forms must carry."""

    api_key: str
    csrf_token: str


class SessionSealer:
    """Seals and opens session cookies; derives their CSRF tokens."""

    def __init__(self, secret_key: Keys) -> None:
        self._box = SecretBox(secret_key, "ui-session")
        self._csrf = TokenSigner(secret_key, "ui-csrf", mac_bytes=16)

    def seal(self, api_key: str, now: int) -> str:
        """A new session's cookie; its random ``nonce`` keys the session's CSRF token."""
        nonce = secrets.token_hex(16)
        return self._box.encrypt(orjson.dumps({"key": api_key, "at": now, "nonce": nonce}))

    def open(self, cookie: str | None, now: int) -> Session | None:
        """The session a cookie holds, or None: absent, forged, damaged or expired."""
        if not cookie:
            return None
        try:
            fields = orjson.loads(self._box.decrypt(cookie))
        except (DecryptionError, orjson.JSONDecodeError):
            return None
        if not isinstance(fields, dict):
            return None
        key, at, nonce = fields.get("key"), fields.get("at"), fields.get("nonce")
        if not isinstance(key, str) or not isinstance(nonce, str) or not isinstance(at, int):
            return None
        if not 0 <= now - at < SESSION_MS:
            return None
        return Session(key, self._csrf.digest(nonce.encode()).hex())


def new_sign_in_token() -> str:
    return secrets.token_hex(16)


def same_token(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison; an absent or empty value never matches."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())
