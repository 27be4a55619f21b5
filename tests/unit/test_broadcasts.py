"""Broadcast content, counting and unsubscribe tokens (pure)."""

from __future__ import annotations

import base64
import dataclasses
import email
import email.policy
import html as html_lib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.broadcasts import (
    BroadcastContent,
    Member,
    MemberContent,
    Skip,
    parse_broadcast,
    recipient_data,
    skip_reason,
    tally_chunk,
)
from posthaste.core.contacts import Contact
from posthaste.core.headers import validate_subject
from posthaste.core.ids import new_id
from posthaste.core.templates import (
    ParsedContent,
    RenderedContent,
    Values,
    parse_content,
    render,
)
from posthaste.core.unsubscribe import (
    TokenKind,
    UnsubscribeLinks,
    _b32,
    has_own_list_unsubscribe,
    header_lines,
    read_token,
)
from posthaste.errors import (
    DailyQuotaExceeded,
    RecipientSuppressed,
    RecipientUnsubscribed,
    ValidationError,
)
from tests import records

TEAM, OTHER = new_id(), new_id()
LINKS = UnsubscribeLinks("k" * 40, "https://mail.example.com/")


def contact(**fields: object) -> Contact:
    values: dict[str, object] = {
        "id": new_id(), "team_id": TEAM, "email": "ann@example.com", "email_key": "ann@example.com",
        "first_name": None, "last_name": None, "unsubscribed": False, "properties": {},
        "created_at": 0, "updated_at": 0,
    }  # fmt: skip
    return Contact(**{**values, **fields})  # type: ignore[arg-type]


def test_a_token_names_its_contact_and_only_in_its_team() -> None:
    ann = contact()
    token = LINKS.token(TEAM, ann.id)
    assert len(token) == 42 and token == token.lower()
    read = read_token(token)
    assert read is not None and (read.kind, read.subject_id) == (TokenKind.CONTACT, ann.id)
    assert LINKS.genuine(read, TEAM) and not LINKS.genuine(read, OTHER)
    assert read_token(f"UNSUBSCRIBE+{token.upper()}") == read  # a mailto local part, any case
    assert not UnsubscribeLinks("x" * 40, "https://a").genuine(read, TEAM)  # another key


@given(st.integers(min_value=0, max_value=41), st.sampled_from("abcdefghijklmnopqrstuvwxyz234567"))
def test_every_altered_token_is_refused(position: int, char: str) -> None:
    ann = new_id()
    token = LINKS.token(TEAM, ann)
    changed = token[:position] + char + token[position + 1 :]
    read = read_token(changed)
    if changed == token:
        assert read is not None and LINKS.genuine(read, TEAM)
    else:
        assert read is None or not LINKS.genuine(read, TEAM)


@given(st.binary(max_size=40))
def test_tokens_are_base32_as_the_standard_library_writes_it(data: bytes) -> None:
    expected = base64.b32encode(data).decode("ascii").rstrip("=").lower()
    assert _b32(data) == expected


def test_headers_carry_the_link_and_the_mailto_address() -> None:
    token = LINKS.token(TEAM, new_id())
    headers = LINKS.headers(token, "Acme.TEST")
    assert headers == {
        "List-Unsubscribe": f"<https://mail.example.com/unsubscribe/{token}>, "
        f"<mailto:unsubscribe+{token}@send.acme.test>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
    }
    assert len(f"unsubscribe+{token}") <= 64  # RFC 5321's local part


def test_an_email_token_names_its_email_and_is_never_a_contact_token() -> None:
    email_id = new_id()
    token = LINKS.email_token(TEAM, email_id)
    assert len(token) == 44 and len(f"unsubscribe+{token}") <= 64
    read = read_token(token)
    assert read is not None and (read.kind, read.subject_id) == (TokenKind.EMAIL, email_id)
    assert LINKS.genuine(read, TEAM) and not LINKS.genuine(read, OTHER)
    assert read_token(f"unsubscribe+{token.upper()}") == read
    # The same id as a contact's token carries another MAC: one kind never passes as the other.
    as_contact = read_token(LINKS.token(TEAM, email_id))
    assert as_contact is not None and as_contact.kind is TokenKind.CONTACT
    assert as_contact.mac != read.mac
    assert not LINKS.genuine(
        dataclasses.replace(read, kind=TokenKind.CONTACT), TEAM
    ) and not LINKS.genuine(dataclasses.replace(as_contact, kind=TokenKind.EMAIL), TEAM)
    for bad in (token[:-1], token + "a", "a" * 44, "unsubscribe+", "x" * 65):
        found = read_token(bad)
        assert found is None or not LINKS.genuine(found, TEAM), bad


@given(st.integers(min_value=0, max_value=43), st.sampled_from("abcdefghijklmnopqrstuvwxyz234567"))
def test_every_altered_email_token_is_refused(position: int, char: str) -> None:
    token = LINKS.email_token(TEAM, new_id())
    changed = token[:position] + char + token[position + 1 :]
    read = read_token(changed)
    if changed == token:
        assert read is not None and LINKS.genuine(read, TEAM)
    else:
        assert read is None or not LINKS.genuine(read, TEAM)


def test_a_senders_own_list_unsubscribe_is_seen_in_headers_and_in_a_kept_submission() -> None:
    assert has_own_list_unsubscribe({"list-UNSUBSCRIBE": "<mailto:x@a.test>"}, None)
    assert not has_own_list_unsubscribe({"List-Unsubscribe-Post": "x", "X-Other": "y"}, None)
    raw = b"From: a@acme.test\r\nList-Unsubscribe : <https://a.test/u>\r\n\r\nbody\r\n"
    assert has_own_list_unsubscribe({}, raw)
    in_body = b"From: a@acme.test\r\n\r\nList-Unsubscribe: <https://a.test/u>\r\n"
    assert not has_own_list_unsubscribe({}, in_body)
    folded = b"Subject: hi\r\n X-List-Unsubscribe: no\r\n\r\n"
    assert not has_own_list_unsubscribe({}, folded)


def test_header_lines_fold_the_list_between_its_uris() -> None:
    token = LINKS.email_token(TEAM, new_id())
    lines = header_lines(LINKS.headers(token, "acme.test"))
    assert (
        lines
        == (
            f"List-Unsubscribe: <https://mail.example.com/unsubscribe/{token}>,\r\n"
            f" <mailto:unsubscribe+{token}@send.acme.test>\r\n"
            "List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
        ).encode()
    )
    parsed = email.message_from_bytes(lines + b"\r\n", policy=email.policy.default)
    assert str(parsed["List-Unsubscribe"]) == LINKS.headers(token, "acme.test")["List-Unsubscribe"]


def test_contact_fields_render_and_missing_ones_render_empty() -> None:
    parsed = parse_content(
        "Hi {{contact.first_name}} {{contact.properties.city}}",
        "<p>{{contact.properties.plan}} &amp; {{ offer }}</p>",
        "{{contact.email}} {{unsubscribe_url}}",
    )
    ann = contact(first_name="Ann", properties={"plan": "<pro>"})
    rendered = MemberContent(parsed, {}, {"offer": "10%"}, "Preview <3").render(ann, "https://u/1")
    assert rendered.subject == "Hi Ann "  # no city: empty
    assert rendered.html is not None and rendered.html.endswith("<p>&lt;pro&gt; &amp; 10%</p>")
    assert rendered.html.startswith('<div style="display:none') and "Preview &lt;3" in rendered.html
    assert rendered.text == "ann@example.com https://u/1"
    with pytest.raises(ValidationError, match="offer"):
        MemberContent(parsed, {}, {}, None).render(ann, "u")


def test_a_contact_value_never_breaks_the_subject_line() -> None:
    parsed = parse_content("Plan: {{contact.properties.plan}}", None, "{{contact.properties.plan}}")
    eve = contact(properties={"plan": "free\r\nBcc: x@example.com\u2028"})
    rendered = MemberContent(parsed, {}, {}, None).render(eve, "u")
    assert rendered.subject == "Plan: free Bcc: x@example.com"
    assert rendered.text == "free\r\nBcc: x@example.com\u2028"
    whole = parse_content("All: {{contact.properties}}", None, "x")  # JSON keeps U+2028 as is
    subject = MemberContent(whole, {}, {}, None).render(eve, "u").subject
    assert subject == 'All: {"plan":"free\\r\\nBcc: x@example.com "}'


def _rendered_whole(
    parsed: ParsedContent,
    fallbacks: dict[str, object],
    data: dict[str, object],
    preview: str | None,
    member: Contact,
    url: str,
) -> RenderedContent | str:
    """The content rendered whole for one member, placeholder by placeholder (what
    ``MemberContent`` compiles once): the reference it must agree with; an error as its text."""
    variables = recipient_data(data, member, url)
    blanks: dict[str, object] = {
        path: ""
        for template in (parsed.subject, parsed.html, parsed.text)
        if template is not None
        for path in template.placeholders
        if path.startswith("contact.")
    }
    merged = {**blanks, **fallbacks}

    class OneLine(Values):
        def text_of(self, path: str) -> str | None:
            text = super().text_of(path)
            if text is not None and (path == "contact" or path.startswith("contact.")):
                return re.sub(r"[\x00-\x1f\x7f\u2028\u2029]+", " ", text).strip()
            return text

    try:
        subject = None
        if parsed.subject is not None:
            one_line = render(parsed.subject, OneLine(variables, merged), escape_html=False)
            subject = validate_subject(one_line)
        values = Values(variables, merged)
        html = None
        if parsed.html is not None:
            html = render(parsed.html, values, escape_html=True)
        text = None if parsed.text is None else render(parsed.text, values, escape_html=False)
    except ValidationError as exc:
        return exc.message
    if html is not None and preview:
        hidden = "display:none;max-height:0;overflow:hidden;mso-hide:all"
        html = f'<div style="{hidden}">{html_lib.escape(preview)}</div>{html}'
    return RenderedContent(subject, html, text)


_PLACEHOLDERS = st.sampled_from(
    [
        "{{contact.first_name}}", "{{{contact.first_name}}}", "{{ contact.properties.plan }}",
        "{{contact.properties.city}}", "{{contact}}", "{{contact.email}}", "{{unsubscribe_url}}",
        "{{{unsubscribe_url}}}", "{{offer}}", "{{{offer}}}", "{{missing}}", "{{deal.price}}",
        "{{contact.properties.flat}}", "{", "}", "{0}", "<b>&", " ", "x",
    ]
)  # fmt: skip
_TEMPLATES = st.one_of(st.none(), st.lists(_PLACEHOLDERS, max_size=8).map("".join))
_TEXT = st.text(st.sampled_from("aZ <>&\"'{}\r\n\t\u2028\x00é"), max_size=6)


@given(
    subject=_TEMPLATES, html=_TEMPLATES, text=_TEMPLATES,
    first_name=st.one_of(st.none(), _TEXT), plan=st.one_of(st.none(), _TEXT, st.integers()),
    offer=st.one_of(st.none(), _TEXT, st.floats(allow_nan=False)),
    fallbacks=st.dictionaries(st.sampled_from(["missing", "offer", "contact.properties.city"]), _TEXT),  # noqa: E501
    preview=st.one_of(st.none(), _TEXT),
)  # fmt: skip
def test_compiled_content_renders_as_the_whole_content_does(
    subject: str | None,
    html: str | None,
    text: str | None,
    first_name: str | None,
    plan: object,
    offer: object,
    fallbacks: dict[str, object],
    preview: str | None,
) -> None:
    parsed = parse_content(subject, html, text)
    data: dict[str, object] = {"deal": {"price": 3}, "contact.properties.flat": "flat <key>"}
    if offer is not None:
        data["offer"] = offer
    properties = {} if plan is None else {"plan": plan}
    member = contact(first_name=first_name, properties=properties)
    expected = _rendered_whole(parsed, fallbacks, data, preview, member, "https://u/{1}")
    try:
        got: RenderedContent | str = MemberContent(parsed, fallbacks, data, preview).render(
            member, "https://u/{1}"
        )
    except ValidationError as exc:
        got = exc.message
    assert got == expected


def test_skips_and_the_tally() -> None:
    plain, gone, chose_out, chose_in = (
        Member(contact()), Member(contact(unsubscribed=True)), Member(contact(), "opt_out"),
        Member(contact(), "opt_in"),
    )  # fmt: skip
    assert skip_reason(gone, None) is Skip.UNSUBSCRIBED
    assert skip_reason(chose_out, "opt_in") is Skip.TOPIC
    assert skip_reason(plain, "opt_out") is Skip.TOPIC and skip_reason(plain, "opt_in") is None
    assert skip_reason(chose_in, "opt_out") is None and skip_reason(plain, None) is None
    email = records.emails()[0]
    plan = [(plain, None), (gone, Skip.UNSUBSCRIBED), (chose_in, None), (chose_out, Skip.TOPIC)]
    tally = tally_chunk(plan, [email, RecipientSuppressed("listed")])
    assert tally.cursor == chose_out.contact.id and tally.quota is None
    assert tally.counts.as_dict() == {
        "recipients": 4, "sent": 1, "skipped_unsubscribed": 1, "skipped_suppressed": 1,
        "skipped_topic": 1, "failed": 0,
    }  # fmt: skip
    # A member who unsubscribed after the chunk was read is refused by the send path.
    late = tally_chunk(plan, [email, RecipientUnsubscribed("unsubscribed meanwhile")])
    assert (late.counts.skipped_unsubscribed, late.counts.skipped_suppressed) == (2, 0)
    quota = DailyQuotaExceeded("used up", retry_after=1, limit=1, reset=1)
    stopped = tally_chunk(plan, [email, quota])
    assert stopped.quota is quota and stopped.cursor == gone.contact.id
    assert (stopped.counts.recipients, stopped.counts.sent) == (2, 1)


def test_resend_names_and_patch_merging() -> None:
    segment = new_id()
    created = parse_broadcast(
        {"audience_id": segment, "from": "News <n@acme.test>", "template": {"id": "t",
         "variables": {"a": 1}}}, 0,
    )  # fmt: skip
    assert created == BroadcastContent(
        segment_id=segment, from_="News <n@acme.test>", template="t", data={"a": 1}
    )
    patched = parse_broadcast(
        {"subject": "S", "topic_id": None, "reply_to": "r@x.test"}, 0, created
    )
    assert (patched.subject, patched.template, patched.reply_to) == ("S", "t", ["r@x.test"])
    with pytest.raises(ValidationError, match="segment_id"):
        parse_broadcast({"from": "n@acme.test"}, 0)
    with pytest.raises(ValidationError, match="topic_id"):
        parse_broadcast({"topic_id": "x"}, 0, created)
