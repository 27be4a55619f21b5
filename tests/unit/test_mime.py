"""The MIME builder: structure, encodings, header round-trips, line limits and DKIM stability."""

from __future__ import annotations

import base64
import email
import email.policy
import os
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from email.header import decode_header, make_header
from email.message import EmailMessage, MIMEPart
from email.utils import format_datetime

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import example, given
from hypothesis import strategies as st

from posthaste.core import html_text
from posthaste.core.mime import (
    OutgoingMessage,
    build_message,
    html_to_text,
    make_message_id,
)
from posthaste.core.models import Attachment

DATE = datetime(2024, 5, 1, 12, 30, 15, tzinfo=timezone(timedelta(hours=2)))
LOGO = Attachment("logo.png", "image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "logo")
REPORT = Attachment("report.pdf", "application/pdf", b"%PDF-1.7\n" + bytes(range(256)))

HEADER_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"))
BODY_TEXT = st.text(st.characters(exclude_categories=["Cs"]))


def outgoing(**changes: object) -> OutgoingMessage:
    message = OutgoingMessage(
        from_="Acme <hello@acme.example>",
        to=["ada@example.com"],
        cc=[],
        reply_to=[],
        subject="Welcome",
        html=None,
        text="Hello Ada",
        headers={},
        attachments=[],
        message_id="0190b7a5-7c1e-7d3a-9f1e-2b7c9a1d4e5f@acme.example",
        date=DATE,
    )
    return replace(message, **changes)  # type: ignore[arg-type]


def parse(raw: bytes) -> EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)


def tree(part: MIMEPart) -> object:
    """The content types of a message, nested: ("multipart/x", [children]) or "type/sub"."""
    if part.is_multipart():
        return (part.get_content_type(), [tree(child) for child in part.iter_parts()])
    return part.get_content_type()


def leaves(part: MIMEPart) -> list[MIMEPart]:
    return [leaf for leaf in part.walk() if not leaf.is_multipart()]


def leaf(part: MIMEPart, content_type: str) -> MIMEPart:
    (found,) = [p for p in leaves(part) if p.get_content_type() == content_type]
    return found


def as_sent(text: str) -> str:
    """A text body as decoded after sending: CRLF line breaks, ending with exactly one."""
    lines = re.split(r"\r\n|\r|\n", text)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return "".join(f"{line}\r\n" for line in lines)


def assert_wire_safe(raw: bytes) -> None:
    assert b"\r" not in raw.replace(b"\r\n", b"")
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert raw.endswith(b"\r\n")
    assert max(len(line) for line in raw.split(b"\r\n")) <= 998


# Structure


def test_text_only_is_a_single_text_part() -> None:
    message = parse(build_message(outgoing(text="Hello Ada\nBye")))

    assert tree(message) == "text/plain"
    assert message["MIME-Version"] == "1.0"
    assert message.get_content_charset() == "utf-8"
    assert message["Content-Transfer-Encoding"] == "7bit"
    assert message.get_content() == "Hello Ada\r\nBye\r\n"


def test_html_only_gets_a_generated_text_alternative() -> None:
    html = '<p>Hi <a href="https://acme.example/start">get started</a></p>'
    message = parse(build_message(outgoing(html=html, text=None)))

    assert tree(message) == ("multipart/alternative", ["text/plain", "text/html"])
    text = leaf(message, "text/plain").get_content()
    assert text == "Hi [get started](https://acme.example/start)\r\n"
    assert leaf(message, "text/html").get_content() == html + "\r\n"


def test_html_and_text_are_alternatives_in_that_order() -> None:
    message = parse(build_message(outgoing(html="<b>Hi</b>", text="Hi, plainly")))

    assert tree(message) == ("multipart/alternative", ["text/plain", "text/html"])
    assert leaf(message, "text/plain").get_content() == "Hi, plainly\r\n"


def test_inline_image_is_related_to_the_html() -> None:
    raw = build_message(outgoing(html='<img src="cid:logo">', attachments=[LOGO]))
    message = parse(raw)

    related = ("multipart/related", ["text/html", "image/png"])
    assert tree(message) == ("multipart/alternative", ["text/plain", related])
    image = leaf(message, "image/png")
    assert image["Content-ID"] == "<logo>"
    assert image.get_content_disposition() == "inline"
    assert image.get_filename() == "logo.png"
    assert image["Content-Transfer-Encoding"] == "base64"
    assert b"Content-ID: <logo>\r\n" in raw


def test_regular_attachment_wraps_everything_in_mixed() -> None:
    message = parse(
        build_message(outgoing(html='<img src="cid:logo">', attachments=[LOGO, REPORT]))
    )

    related = ("multipart/related", ["text/html", "image/png"])
    alternative = ("multipart/alternative", ["text/plain", related])
    assert tree(message) == ("multipart/mixed", [alternative, "application/pdf"])
    report = leaf(message, "application/pdf")
    assert report.get_content_disposition() == "attachment"
    assert report.get_filename() == "report.pdf"
    assert report.get_param("name") == "report.pdf"


def test_text_with_attachment_is_mixed() -> None:
    message = parse(build_message(outgoing(attachments=[REPORT])))

    assert tree(message) == ("multipart/mixed", ["text/plain", "application/pdf"])


def test_html_with_attachment_but_no_inline_parts_has_no_related() -> None:
    message = parse(build_message(outgoing(html="<p>Hi</p>", text=None, attachments=[REPORT])))

    alternative = ("multipart/alternative", ["text/plain", "text/html"])
    assert tree(message) == ("multipart/mixed", [alternative, "application/pdf"])


def test_inline_part_without_html_travels_as_an_attachment() -> None:
    message = parse(build_message(outgoing(attachments=[LOGO])))

    assert tree(message) == ("multipart/mixed", ["text/plain", "image/png"])
    image = leaf(message, "image/png")
    assert image.get_content_disposition() == "attachment"
    assert image["Content-ID"] == "<logo>"


def test_neither_html_nor_text_gives_an_empty_text_part() -> None:
    message = parse(build_message(outgoing(html=None, text=None)))

    assert tree(message) == "text/plain"
    assert message.get_content() == "\r\n"


def test_composite_or_malformed_attachment_types_are_sent_as_octet_stream() -> None:
    attachments = [
        Attachment("a.eml", "message/rfc822", b"From: x"),
        Attachment("b.bin", "not a type", b"\x00"),
        Attachment("c.csv", "Text/CSV; charset=utf-8", b"a,b"),
    ]
    message = parse(build_message(outgoing(attachments=attachments)))

    types = [part.get_content_type() for part in leaves(message)[1:]]
    assert types == ["application/octet-stream", "application/octet-stream", "text/csv"]


# Bodies and attachments


def test_attachment_bytes_round_trip_exactly() -> None:
    content = bytes(range(256)) * 40 + os.urandom(100_000)
    attachment = Attachment("blob.bin", "application/octet-stream", content)
    message = parse(build_message(outgoing(attachments=[attachment])))

    decoded = leaf(message, "application/octet-stream").get_content()
    assert decoded == content


def test_inline_attachment_bytes_round_trip_exactly() -> None:
    message = parse(build_message(outgoing(html="<p>x</p>", attachments=[LOGO])))

    assert leaf(message, "image/png").get_content() == LOGO.content


def test_non_ascii_filename_uses_rfc_2231_and_decodes_back() -> None:
    name = "Résumé «final» 履歴書.pdf"
    attachment = Attachment(name, "application/pdf", b"%PDF")
    raw = build_message(outgoing(attachments=[attachment]))

    assert raw.isascii()
    assert re.search(rb"filename\*(0\*)?=utf-8''R%C3%A9sum%C3%A9", raw)
    assert leaf(parse(raw), "application/pdf").get_filename() == name


def test_non_ascii_text_is_quoted_printable() -> None:
    raw = build_message(outgoing(text="Grüße aus Köln"))

    assert raw.isascii()
    message = parse(raw)
    assert message["Content-Transfer-Encoding"] == "quoted-printable"
    assert message.get_content() == "Grüße aus Köln\r\n"


def test_long_ascii_lines_are_quoted_printable_within_76_characters() -> None:
    raw = build_message(outgoing(text="word " * 40))
    message = parse(raw)

    assert message["Content-Transfer-Encoding"] == "quoted-printable"
    body = raw.split(b"\r\n\r\n", 1)[1]
    assert max(len(line) for line in body.split(b"\r\n")) <= 76
    assert message.get_content() == "word " * 40 + "\r\n"


def test_text_that_could_spell_a_boundary_is_never_sent_7bit() -> None:
    text = "--=_alternative_0123\nhello"
    message = parse(build_message(outgoing(text=text, html="<p>hello</p>")))

    plain = leaf(message, "text/plain")
    assert plain["Content-Transfer-Encoding"] == "quoted-printable"
    assert plain.get_content() == as_sent(text)


def test_a_5000_character_html_line_stays_within_line_limits() -> None:
    html = "<p>" + "x" * 2500 + "é" * 2500 + "</p>"
    raw = build_message(outgoing(html=html, text=None, attachments=[LOGO, REPORT]))

    assert_wire_safe(raw)
    assert max(len(line) for line in raw.split(b"\r\n")) <= 78
    assert leaf(parse(raw), "text/html").get_content() == html + "\r\n"


# Headers


def test_headers_are_written_once_each() -> None:
    raw = build_message(
        outgoing(
            to=["ada@example.com", '"Lovelace, Ada" <ada2@example.com>'],
            cc=["Charles <cb@example.com>"],
            reply_to=["support@acme.example"],
        )
    )
    message = parse(raw)

    assert message["From"].addresses[0].display_name == "Acme"
    assert [a.addr_spec for a in message["To"].addresses] == [
        "ada@example.com",
        "ada2@example.com",
    ]
    assert message["To"].addresses[1].display_name == "Lovelace, Ada"
    assert str(message["Cc"]) == "Charles <cb@example.com>"
    assert str(message["Reply-To"]) == "support@acme.example"
    assert message["Subject"] == "Welcome"
    assert message["Date"].datetime == DATE
    assert f"Date: {format_datetime(DATE)}\r\n".encode() in raw
    for name in ("From", "To", "Cc", "Reply-To", "Subject", "Date", "Message-ID", "MIME-Version"):
        assert len(message.get_all(name, [])) == 1, name


def test_empty_address_fields_are_left_out() -> None:
    message = parse(build_message(outgoing(to=[], cc=["ada@example.com"])))

    assert "To" not in message
    assert "Reply-To" not in message
    assert str(message["Cc"]) == "ada@example.com"


def test_bcc_never_appears() -> None:
    raw = build_message(outgoing(cc=["c@example.com"]))

    assert b"bcc" not in raw.lower()
    with pytest.raises(ValueError, match="Bcc"):
        build_message(outgoing(headers={"Bcc": "hidden@example.com"}))


@pytest.mark.parametrize("name", ["From", "subject", "Message-ID", "Content-Type", "MIME-Version"])
def test_custom_headers_cannot_replace_the_builders_own(name: str) -> None:
    with pytest.raises(ValueError, match="MIME builder"):
        build_message(outgoing(headers={name: "x"}))


def test_non_ascii_subject_and_display_name_are_encoded_and_decode_back() -> None:
    subject = "Grüße — 你好, Ada! 🎉"
    raw = build_message(outgoing(from_="Jürgen Müller <j@acme.example>", subject=subject))
    message = parse(raw)

    assert raw.isascii()
    assert b"Subject: =?utf-8?b?" in raw
    assert message["Subject"] == subject
    assert message["From"].addresses[0].display_name == "Jürgen Müller"


def test_subject_keeps_text_the_stdlib_would_lose() -> None:
    for subject in ["  leading spaces", "a \u2028 b", "=?utf-8?q?not_encoded?=", "tab\there"]:
        assert parse(build_message(outgoing(subject=subject)))["Subject"] == subject


def test_long_ascii_subject_is_folded_at_spaces_and_not_encoded() -> None:
    subject = " ".join(f"word{i}" for i in range(40))
    raw = build_message(outgoing(subject=subject))

    header = raw.split(b"\r\n\r\n", 1)[0]
    assert b"=?" not in header
    assert max(len(line) for line in header.split(b"\r\n")) <= 76
    assert parse(raw)["Subject"] == subject


def test_custom_headers_are_present() -> None:
    unsubscribe = "<https://acme.example/unsubscribe/" + "t0k3n" * 40 + ">, <mailto:u@acme.example>"
    headers = {
        "List-Unsubscribe": unsubscribe,
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        "X-Campaign": "Café crème",
    }
    raw = build_message(outgoing(headers=headers))
    message = parse(raw)

    for name, value in headers.items():
        assert message[name] == value
    # A long URL is written verbatim (folded only at its space), never RFC 2047-encoded.
    first, second = unsubscribe.split(" ")
    assert f"List-Unsubscribe: {first}\r\n {second}\r\n".encode() in raw
    assert b"X-Campaign: =?utf-8?b?" in raw


@pytest.mark.parametrize(
    "changes",
    [
        {"subject": "Hi\r\nBcc: victim@example.com"},
        {"headers": {"X-Note": "a\nBcc: victim@example.com"}},
        {"headers": {"X-Note": "a\rb"}},
        {"to": ["ada@example.com\r\nBcc: victim@example.com"]},
    ],
)
def test_line_breaks_in_header_values_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="line break"):
        build_message(outgoing(**changes))


@pytest.mark.parametrize(
    "given_id",
    ["abc.123@acme.example", "<abc.123@acme.example>", " <abc.123@acme.example> "],
)
def test_message_id_is_normalised_to_one_pair_of_brackets(given_id: str) -> None:
    raw = build_message(outgoing(message_id=given_id))

    assert b"\r\nMessage-ID: <abc.123@acme.example>\r\n" in raw
    assert parse(raw)["Message-ID"] == "<abc.123@acme.example>"


@pytest.mark.parametrize("bad_id", ["", "<>", "<<a@b>>", "a b@c", "é@acme.example"])
def test_malformed_message_ids_are_refused(bad_id: str) -> None:
    with pytest.raises(ValueError, match="Message-ID"):
        build_message(outgoing(message_id=bad_id))


def test_make_message_id() -> None:
    assert (
        make_message_id("xn--bcher-kva.example", "0190b7a5") == "<0190b7a5@xn--bcher-kva.example>"
    )


def test_naive_date_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        build_message(outgoing(date=datetime(2024, 5, 1, 12, 0)))


def test_non_ascii_local_part_makes_an_smtputf8_message() -> None:
    message = outgoing(to=["Zoë <用户@xn--fiqs8s.example>"], subject="Grüße")
    raw = build_message(message)
    # BytesParser reads header bytes as ASCII (surrogate-escaping the rest); decode first.
    parsed = email.message_from_string(raw.decode("utf-8"), policy=email.policy.default)

    assert "To: Zoë <用户@xn--fiqs8s.example>\r\n".encode() in raw
    assert parsed["To"].addresses[0].username == "用户"
    assert parsed["Subject"] == "Grüße"
    assert_wire_safe(raw)


def test_ascii_addresses_do_not_need_smtputf8() -> None:
    message = outgoing(from_="Jürgen <j@xn--bcher-kva.example>")
    assert build_message(message).isascii()


def test_same_input_gives_the_same_bytes() -> None:
    message = outgoing(html='<img src="cid:logo">', attachments=[LOGO, REPORT])

    assert build_message(message) == build_message(message)
    assert build_message(message) == build_message(
        replace(message, message_id="<" + message.message_id + ">")
    )


def test_every_multipart_has_its_own_boundary() -> None:
    raw = build_message(outgoing(html='<img src="cid:logo">', attachments=[LOGO, REPORT]))
    boundaries = [part.get_boundary() for part in parse(raw).walk() if part.is_multipart()]

    assert len(set(boundaries)) == 3
    assert all(boundary and boundary.startswith("=_") for boundary in boundaries)


# Property: arbitrary content never breaks the build and decodes to what was given.


@given(subject=HEADER_TEXT, text=BODY_TEXT, html=BODY_TEXT, custom=HEADER_TEXT)
@example(subject=" =?utf-8?q?x?=  a\u2028b\x00", text="", html="", custom=" x ")
@example(subject="é" * 300, text="\r\n\n\r", html="x" * 5000, custom="y" * 2000)
def test_any_content_round_trips(subject: str, text: str, html: str, custom: str) -> None:
    raw = build_message(
        outgoing(subject=subject, text=text, html=html, headers={"X-Custom": custom})
    )
    message = parse(raw)

    assert_wire_safe(raw)
    assert message["Subject"] == subject
    assert message["X-Custom"] == custom
    assert leaf(message, "text/plain").get_content() == as_sent(text)
    assert leaf(message, "text/html").get_content() == as_sent(html)


@given(html=BODY_TEXT)
def test_html_only_text_is_generated_from_it(html: str) -> None:
    raw = build_message(outgoing(html=html, text=None))

    assert_wire_safe(raw)
    assert leaf(parse(raw), "text/plain").get_content() == as_sent(html_to_text(html))


# DKIM


def test_dkim_signature_over_the_built_message_verifies() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public_der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(public_der)
    raw = build_message(
        outgoing(
            from_="Jürgen <j@acme.example>",
            subject="Grüße " + "long " * 30,
            html="<p>" + "é" * 3000 + '</p><img src="cid:logo">',
            text=None,
            headers={"List-Unsubscribe": "<https://acme.example/u/" + "x" * 150 + ">"},
            attachments=[LOGO, REPORT],
        )
    )

    signature = dkim.sign(
        raw, b"s1", b"acme.example", private_pem, canonicalize=(b"relaxed", b"relaxed")
    )

    def dnsfunc(name: bytes, timeout: int = 5) -> bytes:
        assert name == b"s1._domainkey.acme.example."
        return record

    assert dkim.verify(signature + raw, dnsfunc=dnsfunc)
    tampered = raw.replace(b"=C3=A9", b"=C3=A8", 1)  # one é in the html becomes è
    assert tampered != raw
    assert not dkim.verify(signature + tampered, dnsfunc=dnsfunc)


# html_to_text


def test_html_to_text_keeps_links_inline() -> None:
    html = '<p>See <a href="https://acme.example/a?b=1&amp;c=2">our site</a>.</p>'

    assert html_to_text(html) == "See [our site](https://acme.example/a?b=1&c=2)."


def test_html_to_text_renders_lists() -> None:
    html = "<ul><li>one</li><li>two</li></ul><ol><li>first</li><li>second</li></ol>"

    assert html_to_text(html) == "  * one\n  * two\n\n  1. first\n  2. second"


def test_html_to_text_survives_malformed_html() -> None:
    assert html_to_text("<p>unclosed <b>bold <i>text") == "unclosed bold text"
    assert html_to_text("Hi <div") == "Hi"  # as in a browser, an unfinished tag is dropped
    assert html_to_text("</p></table>&bogus; &#0;") == "&bogus; \ufffd"
    assert html_to_text("") == html_to_text(" \r\n ") == ""


def test_html_to_text_keeps_the_text_of_deep_or_huge_html() -> None:
    # Past libxml2's 2,048 levels of nesting the parser gives up: the tags are stripped instead.
    deep = "<div>" * 3000 + "deep &amp; down" + "</div>" * 3000 + "<p>after</p>"
    huge = "a" * 11_000_000  # longer than libxml2's default cap on one text node (10 MB)

    assert html_to_text(deep) == "deep & down after"
    assert html_to_text("<div>" * 100 + "x</div><p>y</p>") == "x\n\ny"  # the parser again
    assert html_to_text(huge) == huge


def test_html_to_text_reads_the_text_as_given_whatever_the_html_declares() -> None:
    # The html arrives as text (JSON); a charset it names must not make it be decoded again.
    declared = "<?xml version='1.0' encoding='latin-1'?><meta charset='windows-1252'>"
    text = "Caf\u00e9 \u2019 \U0001f600"

    assert html_to_text(f"{declared}<p>{text}</p>") == text
    assert html_to_text("<p>a<!-- note -->b<?php echo 1 ?></p>") == "ab"


def test_html_to_text_drops_scripts_styles_and_images() -> None:
    html = (
        "<html><head><title>T</title><style>p{color:red}</style></head>"
        "<body><script>alert('x')</script><p>Hi</p><img src='x.png' alt='logo'></body></html>"
    )

    assert html_to_text(html) == "Hi"


def test_html_to_text_does_not_wrap_and_keeps_characters() -> None:
    paragraph = " ".join(["Caf&eacute;&rsquo;s"] * 100)

    assert html_to_text(f"<p>{paragraph}</p>") == " ".join(["Caf\u00e9\u2019s"] * 100)


def test_html_to_text_falls_back_to_stripping_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(html: str) -> str:
        raise IndexError("converter bug")

    monkeypatch.setattr(html_text, "_convert", broken)
    html = "<style>p{}</style><script>alert(1)</script><p>Tom &amp; Jerry</p>"

    assert html_to_text(html) == "Tom & Jerry"


# Property: random messages of every shape parse back to what was given, on a clean wire.

NAME_TEXT = st.text(st.characters(exclude_categories=["Cs", "Cc"]), max_size=80)
ADDR_SPEC = st.from_regex(r"[a-z0-9][a-z0-9.+_-]{0,30}@[a-z0-9-]{1,20}\.example", fullmatch=True)
FILENAME = st.text(st.characters(exclude_categories=["Cs", "Cc"]), min_size=1, max_size=120).filter(
    lambda name: name.strip() == name  # the stdlib's reader strips a filename
)
ATTACHMENT = st.builds(
    Attachment,
    filename=FILENAME,
    content_type=st.sampled_from(["application/pdf", "image/png", "text/csv", "x/y; a=b", "bad"]),
    content=st.binary(max_size=300),
    content_id=st.none() | st.from_regex(r"[a-z0-9.]{1,40}", fullmatch=True),
)


@st.composite
def mailboxes(draw: st.DrawFn) -> str:
    """An address as the send path stores it: ``addr``, ``Name <addr>`` or ``"Na,me" <addr>``."""
    name = draw(NAME_TEXT)
    addr_spec = draw(ADDR_SPEC)
    if not name.strip():
        return addr_spec
    if name != name.strip() or any(char in '()<>[]:;@\\,."' for char in name):
        name = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{name} <{addr_spec}>"


def stdlib_mailbox(text: str) -> tuple[str, str]:
    (address,) = email.policy.default.header_factory("To", text).addresses
    return address.display_name, address.addr_spec


@given(
    from_=mailboxes(),
    to=st.lists(mailboxes(), max_size=4),
    cc=st.lists(mailboxes(), max_size=2),
    subject=HEADER_TEXT,
    custom=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.just(" ")),
    text=st.none() | BODY_TEXT,
    html=st.none() | BODY_TEXT,
    attachments=st.lists(ATTACHMENT, max_size=3),
)
def test_random_messages_parse_back_to_what_was_given(
    from_: str,
    to: list[str],
    cc: list[str],
    subject: str,
    custom: str,
    text: str | None,
    html: str | None,
    attachments: list[Attachment],
) -> None:
    given_message = outgoing(
        from_=from_,
        to=to,
        cc=cc,
        subject=subject,
        text=text,
        html=html,
        headers={"X-Long": custom},
        attachments=attachments,
    )
    raw = build_message(given_message)
    message = parse(raw)

    assert_wire_safe(raw)
    assert raw.isascii()  # every address here is ASCII: no SMTPUTF8, so no 8-bit anywhere
    for name, texts in (("From", [from_]), ("To", to), ("Cc", cc)):
        got = [(a.display_name, a.addr_spec) for a in message[name].addresses] if texts else []
        expected = [stdlib_mailbox(text) for text in texts]
        if got != expected and b"=?utf-8?b?" in raw.split(b"\r\n\r\n", 1)[0]:
            # The stdlib's reader keeps the folding space between two encoded words of a
            # display name (RFC 2047 §6.2 says to drop it): compare without spaces then.
            got, expected = without_spaces(got), without_spaces(expected)
        assert got == expected, name
    assert message["Subject"] == subject
    assert message["X-Long"] == custom
    assert all_parts_decode_back(message, given_message)


def without_spaces(boxes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("".join(name.split()), addr_spec) for name, addr_spec in boxes]


def test_long_non_ascii_display_name_decodes_exactly_by_rfc_2047() -> None:
    name = "Jürgen Müller, Geschäftsführer der Bäckerei Köln-Süd"
    raw = build_message(outgoing(to=[f'"{name}" <j@acme.example>']))
    field = email.message_from_bytes(raw)["To"]  # compat32: the raw, folded field

    assert field.count("=?utf-8?b?") > 1
    assert str(make_header(decode_header(field))) == f"{name} <j@acme.example>"


def all_parts_decode_back(message: EmailMessage, given_message: OutgoingMessage) -> bool:
    parts = leaves(message)
    plain = given_message.text
    if plain is None:
        plain = html_to_text(given_message.html) if given_message.html is not None else ""
    assert parts[0].get_content() == as_sent(plain)
    if given_message.html is not None:
        assert parts[1].get_content() == as_sent(given_message.html)
    sent = parts[2 if given_message.html is not None else 1 :]
    has_html = given_message.html is not None
    inline = [a for a in given_message.attachments if a.content_id is not None and has_html]
    regular = [a for a in given_message.attachments if a not in inline]
    assert len(sent) == len(given_message.attachments)
    for part, attachment in zip(sent, inline + regular, strict=True):
        assert part.get_payload(decode=True) == attachment.content
        assert part.get_filename() == attachment.filename
        assert part.get_param("name") == attachment.filename
        expected = "inline" if attachment in inline else "attachment"
        assert part.get_content_disposition() == expected
        if attachment.content_id:
            assert part["Content-ID"] == f"<{attachment.content_id}>"
    for part in parts:
        if part["Content-Transfer-Encoding"] == "7bit":
            assert part.get_payload(decode=True).isascii()
    return True


def test_html_to_text_keeps_headings_tables_and_preformatted_text() -> None:
    html = (
        "<h2>Receipt</h2><table><tr><td>Plan</td><td>Team</td></tr>"
        "<tr><td>Seats</td><td>12</td></tr></table><pre>  a\n   b</pre>"
        '<p>Hello<br>World <a href="https://acme.example/">https://acme.example/</a></p>'
    )

    expected = (
        "## Receipt\n\nPlan | Team\nSeats | 12\n\n  a\n   b\n\nHello\nWorld https://acme.example/"
    )
    assert html_to_text(html) == expected


def test_html_to_text_nests_lists_and_drops_empty_links() -> None:
    html = '<ul><li>a<ul><li>b</li></ul></li></ul><p>x <a href="https://t.example"><img></a></p>'

    assert html_to_text(html) == "  * a\n    * b\n\nx"
