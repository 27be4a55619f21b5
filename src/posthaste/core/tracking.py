"""Open and click tracking: the signed links, and the message rewritten to use them (pure).

Links: ``<public url>/t/o/<token>`` (the pixel) and ``<public url>/t/c/<token>`` (a link).
A token is ``TokenSigner``'s ``<payload>.<mac>`` (base64url, a 12-byte HMAC-SHA256 under a key
derived from the service's secret key, one key per kind so that neither kind is read as the
other). The payload is a version byte, the team's and the email's ids (16 bytes each) and, for
a click, the original URL (UTF-8): a token is good for that one email of that one team and,
for a click, that one URL; changing any character breaks the MAC. Nothing is stored to read
one back: the redirect goes to the URL the token carries, and nowhere else.

A message is tracked by rewriting its html parts (``core/mime_html.py``, ``core/html_links.py``):
every http(s) link of an ``<a>``/``<area>`` outside ``<head>`` becomes a click link, except
links to this service's own unsubscribe and tracking pages and URLs over ``MAX_URL``
characters; the pixel goes before ``</body>``. Text parts are not rewritten. Tracking a message
twice changes nothing the second time (the pixel is there, the links are ours), so a retry of
a stored message never tracks it again.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

from posthaste.core.crypto import Keys, TokenSigner
from posthaste.core.html_links import rewrite_links
from posthaste.core.mime_html import rewrite_html_parts

OPEN_PURPOSE = "tracking-open"
CLICK_PURPOSE = "tracking-click"
OPEN_PATH = "/t/o/"
CLICK_PATH = "/t/c/"
MAX_URL = 2048  # longer URLs stay as they are (a click link would be ~4/3 as long again)
_VERSION = 1
_IDS = struct.Struct(">B16s16s")  # version, team id, email id
_PIXEL = (
    '<img src="{url}" width="1" height="1" alt="" border="0" style="display:block;'
    'width:1px;height:1px;border:0;margin:0;padding:0;overflow:hidden" />'
)


@dataclass(frozen=True)
class TrackingOptions:
    """A sending domain's ``open_tracking`` and ``click_tracking``."""

    opens: bool = False
    clicks: bool = False
    host: str | None = None  # the domain's verified tracking subdomain, else the public URL's

    @property
    def on(self) -> bool:
        return self.opens or self.clicks


UNTRACKED = TrackingOptions()


@dataclass(frozen=True)
class TrackedEmail:
    """What a genuine token names: an email of a team and, for a click, the original URL."""

    team_id: str
    email_id: str
    url: str | None = None


class TrackingLinks:
    """Makes and reads the tracking links of one service (its secret key and public URL)."""

    def __init__(self, secret_key: Keys, public_url: str, untracked: Sequence[str] = ()) -> None:
        """``untracked``: URL prefixes never rewritten (the unsubscribe pages)."""
        self._base = public_url.rstrip("/")
        parts = urlsplit(self._base)
        self._scheme = parts.scheme or "https"
        self._port = "" if parts.port is None else f":{parts.port}"
        self._opens = TokenSigner(secret_key, OPEN_PURPOSE)
        self._clicks = TokenSigner(secret_key, CLICK_PURPOSE)
        self._untracked = (*untracked, self._base + OPEN_PATH, self._base + CLICK_PATH)

    def _base_for(self, host: str | None) -> str:
        """The public URL, or its scheme and port on a domain's own tracking host."""
        return self._base if host is None else f"{self._scheme}://{host}{self._port}"

    def open_url(self, team_id: str, email_id: str, host: str | None = None) -> str:
        return self._base_for(host) + OPEN_PATH + self._opens.sign(_ids(team_id, email_id))

    def click_url(self, team_id: str, email_id: str, url: str, host: str | None = None) -> str:
        payload = _ids(team_id, email_id) + url.encode("utf-8")
        return self._base_for(host) + CLICK_PATH + self._clicks.sign(payload)

    def read_open(self, token: str) -> TrackedEmail | None:
        """The email of a genuine pixel token, else None (never raises on junk)."""
        payload = self._opens.verify(token)
        if payload is None or len(payload) != _IDS.size:
            return None
        return _read_ids(payload)

    def read_click(self, token: str) -> TrackedEmail | None:
        """The email and URL of a genuine click token, else None (never raises on junk)."""
        payload = self._clicks.verify(token)
        if payload is None or len(payload) <= _IDS.size:
            return None
        found = _read_ids(payload[: _IDS.size])
        try:
            url = payload[_IDS.size :].decode("utf-8")
        except UnicodeDecodeError:
            return None
        if found is None or not is_trackable(url):
            return None
        return TrackedEmail(found.team_id, found.email_id, url)

    def track_message(
        self, raw: bytes, team_id: str, email_id: str, options: TrackingOptions
    ) -> bytes:
        """``raw`` with its html parts tracked as ``options`` say; ``raw`` itself when
        nothing changes (tracking off, no html part, or tracked already)."""
        if not options.on:
            return raw
        rewrite = partial(self._track_html, team_id, email_id, options)
        return rewrite_html_parts(raw, rewrite)

    def _track_html(
        self,
        team_id: str,
        email_id: str,
        options: TrackingOptions,
        text: str,
        charset: str | None,
    ) -> str:
        pixel = None
        if options.opens:
            url = self.open_url(team_id, email_id, options.host)
            if url not in text:
                pixel = _PIXEL.format(url=url)
        link = (
            partial(self._click_link, team_id, email_id, options.host) if options.clicks else None
        )
        return rewrite_links(text, link, pixel=pixel, charset=charset)

    def _click_link(self, team_id: str, email_id: str, host: str | None, url: str) -> str | None:
        base = self._base_for(host)
        if not is_trackable(url) or url.startswith((*self._untracked, base + CLICK_PATH)):
            return None
        return self.click_url(team_id, email_id, url, host)


def is_trackable(url: str) -> bool:
    """An absolute http(s) URL of at most ``MAX_URL`` characters (and no lone surrogate)."""
    scheme = url[:8].lower()
    if not (scheme.startswith("http://") or scheme == "https://") or len(url) > MAX_URL:
        return False
    return url.isascii() or _encodable(url)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _ids(team_id: str, email_id: str) -> bytes:
    return _IDS.pack(_VERSION, uuid.UUID(team_id).bytes, uuid.UUID(email_id).bytes)


def _read_ids(payload: bytes) -> TrackedEmail | None:
    version, team, email = _IDS.unpack(payload)
    if version != _VERSION:
        return None
    return TrackedEmail(str(uuid.UUID(bytes=team)), str(uuid.UUID(bytes=email)))
