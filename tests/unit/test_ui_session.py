"""The dashboard's session cookie and CSRF token (pure: no server)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from posthaste.services.event_stream import StreamStart
from posthaste.ui.live import TOKEN_MS, StreamTokens
from posthaste.ui.rendering import transcript_text
from posthaste.ui.routes.session import _local
from posthaste.ui.session import SESSION_MS, SessionSealer, same_token

SECRET = "unit-secret-" + "k" * 40
KEY = "ph_live_" + "a" * 32


def test_a_sealed_cookie_opens_to_its_key_and_hides_it() -> None:
    sealer = SessionSealer(SECRET)
    cookie = sealer.seal(KEY, 1_000)
    assert KEY not in cookie and "a" * 32 not in cookie
    session = sealer.open(cookie, 2_000)
    assert session is not None and session.api_key == KEY
    assert len(session.csrf_token) == 32 and sealer.open(cookie, 3_000) == session


def test_a_session_expires_and_never_opens_before_it_was_made() -> None:
    sealer = SessionSealer(SECRET)
    cookie = sealer.seal(KEY, 1_000)
    assert sealer.open(cookie, 1_000 + SESSION_MS - 1) is not None
    assert sealer.open(cookie, 1_000 + SESSION_MS) is None
    assert sealer.open(cookie, 999) is None


def test_another_secret_key_opens_nothing() -> None:
    cookie = SessionSealer(SECRET).seal(KEY, 1_000)
    assert SessionSealer("other-secret-" + "k" * 40).open(cookie, 2_000) is None


def test_each_session_has_its_own_csrf_token() -> None:
    sealer = SessionSealer(SECRET)
    first, second = (
        sealer.open(sealer.seal(KEY, 1_000), 1_000),
        sealer.open(sealer.seal(KEY, 1_000), 1_000),
    )
    assert first is not None and second is not None
    assert first.csrf_token != second.csrf_token  # a fresh nonce per seal


@given(st.text(max_size=300))
def test_junk_never_opens_and_never_raises(cookie: str) -> None:
    assert SessionSealer(SECRET).open(cookie, 2_000) is None


@given(st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=255))
def test_a_changed_character_opens_nothing_else(position: int, value: int) -> None:
    sealer = SessionSealer(SECRET)
    cookie = sealer.seal(KEY, 1_000)
    index = position % len(cookie)
    changed = cookie[:index] + chr(value % 128) + cookie[index + 1 :]
    # The last base64 character has spare bits: changing only those gives the same bytes.
    assert sealer.open(changed, 2_000) in (None, sealer.open(cookie, 2_000))


def test_same_token_refuses_empty_and_absent_values() -> None:
    assert same_token("abc", "abc")
    assert not same_token("abc", "abd")
    assert not same_token("", "")
    assert not same_token(None, "abc")
    assert not same_token("abc", None)


def test_after_sign_in_only_dashboard_pages() -> None:
    assert _local("/ui/emails?status=sent") == "/ui/emails?status=sent"
    for elsewhere in ("https://evil.test/", "//evil.test/ui/", "/ui//evil.test", "/ui\\x", "/x"):
        assert _local(elsewhere) == "/ui/emails", elsewhere


def test_a_transcript_reads_as_commands_and_replies() -> None:
    lines = [
        {"elapsed_ms": 0, "note": "connecting to mx.test:25"},
        {"elapsed_ms": 3, "reply": "220 mx.test"},
        {"elapsed_ms": 4, "command": "EHLO me.test"},
    ]
    text = transcript_text(lines).splitlines()
    assert text[0].endswith("-- connecting to mx.test:25")
    assert text[1].endswith("S: 220 mx.test") and text[2].endswith("C: EHLO me.test")


def test_a_stream_token_starts_where_the_page_was_read_for_its_team_only() -> None:
    tokens = StreamTokens(SECRET)
    start = StreamStart((42, "ev-1"), frozenset({"ev-2", "ev-3"}))
    token = tokens.issue("team-a", start, 1_000)
    assert tokens.read(token, "team-a", 2_000) == start
    assert tokens.read(token, "team-b", 2_000) is None
    assert tokens.read(token, "team-a", 1_000 + TOKEN_MS) is None
    assert StreamTokens("other-secret-" + "k" * 40).read(token, "team-a", 2_000) is None
    body, _, mac = token.partition(".")
    assert tokens.read(f"{body}x.{mac}", "team-a", 2_000) is None
    assert tokens.read("junk", "team-a", 2_000) is None
