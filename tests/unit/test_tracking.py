"""Tracking links and tracked messages (pure): tokens that name one email and one URL and
cannot be altered, and messages whose html alone changes, the same way through the MIME
builder's output as through a submitted message."""

from __future__ import annotations

import email
import email.policy
import re
import uuid
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.crypto import TokenSigner
from posthaste.core.mime import OutgoingMessage, build_message
from posthaste.core.tracking import (
    CLICK_PURPOSE,
    MAX_URL,
    TrackedEmail,
    TrackingLinks,
    TrackingOptions,
)
from posthaste.core.tracking_throttle import TrackingThrottle
from tests.unit.test_html_links import Piece, documents

SECRET = "tracking-secret-" + "s" * 32
BASE = "https://mail.example.com"
LINKS = TrackingLinks(SECRET, BASE, untracked=(f"{BASE}/unsubscribe/",))
TEAM, EMAIL, OTHER = (str(uuid.uuid4()) for _ in range(3))
BOTH = TrackingOptions(opens=True, clicks=True)
TOKEN = re.compile(r"/t/([oc])/([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)")

WEB_URLS = st.builds(
    lambda scheme, rest: scheme + rest,
    st.sampled_from(["http://", "https://", "HTTPS://"]),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=200),
)


def token_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


@given(WEB_URLS)
def test_a_click_token_names_its_team_email_and_url(url: str) -> None:
    read = LINKS.read_click(token_of(LINKS.click_url(TEAM, EMAIL, url)))
    assert read is not None and (read.team_id, read.email_id, read.url) == (TEAM, EMAIL, url)


def test_an_open_token_names_its_team_and_email() -> None:
    read = LINKS.read_open(token_of(LINKS.open_url(TEAM, EMAIL)))
    assert read is not None and (read.team_id, read.email_id, read.url) == (TEAM, EMAIL, None)
    assert LINKS.open_url(TEAM, EMAIL) != LINKS.open_url(TEAM, OTHER)
    assert LINKS.open_url(TEAM, EMAIL).startswith(f"{BASE}/t/o/")


@given(st.data())
def test_any_changed_character_makes_a_token_worthless(data: st.DataObject) -> None:
    url = data.draw(WEB_URLS)
    token = token_of(LINKS.click_url(TEAM, EMAIL, url))
    position = data.draw(st.integers(0, len(token) - 1))
    replacement = data.draw(st.sampled_from("AaZz09_-.=+/%"))
    changed = token[:position] + replacement + token[position + 1 :]
    if changed != token:
        read = LINKS.read_click(changed)
        # Base64 padding bits: a change there may decode to the same payload and MAC.
        assert read is None or (read.email_id, read.url) == (EMAIL, url)


def test_tokens_of_one_kind_or_key_are_refused_by_another() -> None:
    click = token_of(LINKS.click_url(TEAM, EMAIL, "https://example.com/"))
    opened = token_of(LINKS.open_url(TEAM, EMAIL))
    assert LINKS.read_open(click) is None and LINKS.read_click(opened) is None
    other_key = TrackingLinks("another-secret-" + "k" * 32, BASE)
    assert other_key.read_click(click) is None and other_key.read_open(opened) is None
    for junk in ["", ".", "a.b", "x" * 5000, "é.é", opened + opened, opened.split(".")[0]]:
        assert LINKS.read_open(junk) is None and LINKS.read_click(junk) is None


def test_a_genuine_signature_over_a_url_that_is_not_web_is_refused() -> None:
    # Only a link the rewriter made can be read back: never a javascript: or data: target.
    signer = TokenSigner(SECRET, CLICK_PURPOSE)
    ids = bytes([1]) + uuid.UUID(TEAM).bytes + uuid.UUID(EMAIL).bytes
    for target in [b"javascript:alert(1)", b"data:text/html,x", b"//evil.test/", b"ftp://x/"]:
        assert LINKS.read_click(signer.sign(ids + target)) is None
    assert LINKS.read_click(signer.sign(ids + b"https://ok.test/")) is not None


def test_a_message_from_the_builder_gets_its_pixel_and_links() -> None:
    html = (
        '<html><head><link href="https://fonts.test/css"></head><body>'
        '<a href="https://shop.test/?a=1&amp;b=2">Shop</a> '
        '<a href="mailto:help@acme.test">Help</a> '
        f'<a href="{BASE}/unsubscribe/abc">Unsubscribe</a></body></html>'
    )
    raw = build(html, text="Shop at https://shop.test/?a=1&b=2")
    tracked = LINKS.track_message(raw, TEAM, EMAIL, BOTH)
    parsed = email.message_from_bytes(tracked, policy=email.policy.default)
    plain, rich = (parsed.get_body(("plain",)), parsed.get_body(("html",)))
    assert plain is not None and rich is not None
    assert plain.get_content().replace("\r\n", "\n") == "Shop at https://shop.test/?a=1&b=2\n"
    content = rich.get_content()
    click = LINKS.click_url(TEAM, EMAIL, "https://shop.test/?a=1&b=2")
    assert f'<a href="{click}">Shop</a>' in content
    assert '<a href="mailto:help@acme.test">' in content
    assert f'<a href="{BASE}/unsubscribe/abc">' in content
    assert '<link href="https://fonts.test/css">' in content
    assert f'<img src="{LINKS.open_url(TEAM, EMAIL)}"' in content
    assert content.index("<img") < content.index("</body>")
    # Headers and the text part's bytes are those built.
    assert tracked.split(b"\r\n\r\n", 1)[0] == raw.split(b"\r\n\r\n", 1)[0]


def test_tracking_twice_changes_nothing_and_off_changes_nothing() -> None:
    raw = build('<p><a href="https://a.test/">a</a></p>')
    once = LINKS.track_message(raw, TEAM, EMAIL, BOTH)
    assert once != raw
    assert LINKS.track_message(once, TEAM, EMAIL, BOTH) is once
    assert LINKS.track_message(raw, TEAM, EMAIL, TrackingOptions()) is raw


def test_opens_only_or_clicks_only() -> None:
    raw = build('<p><a href="https://a.test/">a</a></p>')
    opens = LINKS.track_message(raw, TEAM, EMAIL, TrackingOptions(opens=True))
    clicks = LINKS.track_message(raw, TEAM, EMAIL, TrackingOptions(clicks=True))
    assert b"/t/o/" in opens and b"/t/c/" not in opens
    assert b"/t/c/" in clicks and b"/t/o/" not in clicks


def test_overlong_urls_stay_as_they_are() -> None:
    long_url = "https://a.test/" + "x" * MAX_URL
    raw = build(f'<p><a href="{long_url}">a</a></p>')
    assert LINKS.track_message(raw, TEAM, EMAIL, TrackingOptions(clicks=True)) is raw


@given(documents())
def test_through_the_builder_only_links_and_the_pixel_change(document: list[Piece]) -> None:
    source = "".join(piece.source for piece in document).replace("\r", "")
    pieces = [Piece(p.source.replace("\r", ""), p.tracked, p.url) for p in document]
    tracked = LINKS.track_message(build(source), TEAM, EMAIL, BOTH)
    parsed = email.message_from_bytes(tracked, policy=email.policy.default)
    part = parsed.get_body(("html",))
    assert part is not None
    content = part.get_content().replace("\r\n", "\n")
    want = "".join(
        p.source
        if p.tracked is None or p.url is None
        else p.tracked.format(f'"{LINKS.click_url(TEAM, EMAIL, p.url)}"')
        for p in pieces
    )
    lines = want.split("\n")  # the builder's line ends: CRLF, one after the last line
    if lines[-1] == "":
        lines.pop()
    want = "\n".join(lines) + "\n"
    pixel = re.search(r'<img src="[^"]*/t/o/[^>]*>', content)
    assert pixel is not None
    assert content[: pixel.start()] + content[pixel.end() :] == want
    for kind, token in TOKEN.findall(content):
        read = LINKS.read_click(token) if kind == "c" else LINKS.read_open(token)
        assert read is not None and read.email_id == EMAIL


def test_the_throttle_records_one_hit_per_visitor_per_window_and_caps_each_email() -> None:
    now = [0.0]
    throttle = TrackingThrottle(window=60, burst=3, rate=0.5, max_keys=100, clock=lambda: now[0])

    def hit(ip: str, email_id: str) -> bool:
        return throttle.admit((ip, email_id), email_id)

    assert hit("ip-1", "e1") and not hit("ip-1", "e1")
    assert hit("ip-2", "e1") and hit("ip-3", "e1")
    assert not hit("ip-4", "e1")  # the burst is spent
    assert hit("ip-4", "e2")  # another email has its own
    now[0] = 2.0  # one token back (0.5/s)
    assert hit("ip-4", "e1") and not hit("ip-5", "e1")
    now[0] = 61.0
    assert hit("ip-1", "e1")  # a new window, and tokens back


def test_the_throttle_forgets_beyond_its_size() -> None:
    throttle = TrackingThrottle(window=60, burst=10**6, rate=0, max_keys=10, clock=lambda: 0.0)
    for n in range(1000):
        assert throttle.admit(f"ip-{n}", f"e-{n % 3}")
    assert len(throttle._seen) == 10 and len(throttle._buckets) <= 10


def build(html: str, text: str | None = None) -> bytes:
    return build_message(
        OutgoingMessage(
            from_="Acme <hello@acme.test>",
            to=["ann@example.com"],
            cc=[],
            reply_to=[],
            subject="Hello",
            html=html,
            text=text,
            headers={},
            attachments=[],
            message_id=f"<{EMAIL}@acme.test>",
            date=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        )
    )


def test_a_domains_tracking_host_keeps_the_public_urls_scheme_and_port() -> None:
    links = TrackingLinks(SECRET, "http://mail.example.net:8080/")
    assert links.open_url(TEAM, EMAIL, "links.acme.test").startswith(
        "http://links.acme.test:8080/t/o/"
    )
    url = links.click_url(TEAM, EMAIL, "https://a.example.com/", "links.acme.test")
    assert url.startswith("http://links.acme.test:8080/t/c/")
    assert links.read_click(token_of(url)) == TrackedEmail(TEAM, EMAIL, "https://a.example.com/")
