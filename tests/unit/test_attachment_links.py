"""Signed attachment links: what a token names, and junk or forgeries read as nothing."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from posthaste.api.negotiation import wants_json
from posthaste.core.attachment_links import AttachmentLink, AttachmentLinks

TEAM, ATTACHMENT = str(uuid.uuid4()), str(uuid.uuid4())


def test_a_link_names_its_team_attachment_and_expiry() -> None:
    links = AttachmentLinks("k" * 40, "https://mail.example.com/", ttl_ms=1000)
    url, expires_at = links.link(TEAM, ATTACHMENT, 5_000)
    assert expires_at == 6_000
    base, _, token = url.rpartition("/")
    assert base == "https://mail.example.com/attachments"
    assert links.read(token) == AttachmentLink(TEAM, ATTACHMENT, 6_000)
    # Another secret key does not verify it.
    assert AttachmentLinks("x" * 40, "https://mail.example.com").read(token) is None


@given(st.text(max_size=200))
def test_junk_never_raises(token: str) -> None:
    assert AttachmentLinks("k" * 40, "http://h").read(token) is None


def test_accept_asks_for_json_only_when_it_names_it() -> None:
    for accept in ("application/json", "Application/JSON", "text/html, application/json;q=0.5"):
        assert wants_json(accept), accept
    for accept in (None, "", "*/*", "application/*", "application/json;q=0", "text/plain"):
        assert not wants_json(accept), accept
    assert not wants_json("application/json;q=nope")


def test_a_json_content_type_on_a_get_asks_for_json() -> None:
    # The Node SDK: Accept: */*, Content-Type: application/json on every request.
    assert wants_json("*/*", "application/json")
    assert wants_json(None, "Application/JSON; charset=utf-8")
    assert not wants_json("*/*", "text/plain")
    assert not wants_json("*/*", None)
