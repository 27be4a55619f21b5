"""The html parts of a finished message rewritten in place: every transfer encoding, nested
multiparts, attachments left alone, and the rest of the message byte for byte."""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
from email.message import EmailMessage

from posthaste.core.mime_html import MAX_LINE, rewrite_html_parts

SEEN: list[tuple[str, str | None]] = []


def shout(text: str, charset: str | None) -> str:
    """Marks each html part: ``<p>`` becomes ``<p data-seen>``."""
    SEEN.append((text, charset))
    return text.replace("<p>", "<p data-seen>")


def parse(raw: bytes) -> EmailMessage:
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def html_of(raw: bytes) -> str:
    part = parse(raw).get_body(("html",))
    assert part is not None
    content: str = part.get_content()
    return content.replace("\r\n", "\n")


def alternative(html_cte: str, html: str = "<p>Hello</p>\r\n", charset: str = "utf-8") -> bytes:
    body = html.encode(charset)
    if html_cte == "base64":
        body = base64.encodebytes(body).replace(b"\n", b"\r\n")
    elif html_cte == "quoted-printable":
        body = binascii.b2a_qp(body, istext=True)
    return (
        b"From: a@acme.test\r\nTo: b@example.com\r\nSubject: s\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/alternative; boundary="b1"\r\n\r\n'
        b"preamble\r\n--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n<p>plain</p>\r\n"
        b"--b1\r\n"
        + f"Content-Type: text/html; charset={charset}\r\n".encode()
        + f"Content-Transfer-Encoding: {html_cte}\r\n\r\n".encode()
        + body
        + b"\r\n--b1--\r\nepilogue\r\n"
    )


def test_each_transfer_encoding_is_kept_and_only_the_html_changes() -> None:
    for cte in ["7bit", "8bit", "quoted-printable", "base64"]:
        raw = alternative(cte, "<p>Grüße</p>\r\n" if cte != "7bit" else "<p>Hello</p>\r\n")
        out = rewrite_html_parts(raw, shout)
        assert "<p data-seen>" in html_of(out), cte
        plain = parse(out).get_body(("plain",))
        assert plain is not None and plain.get_content() == "<p>plain</p>"
        assert str(parse(out).get_body(("html",))["Content-Transfer-Encoding"]) == cte
        head, _ = out.split(b"--b1\r\nContent-Type: text/html", 1)
        assert raw.startswith(head) and out.endswith(b"\r\n--b1--\r\nepilogue\r\n")


def test_utf8_is_handed_over_as_text_and_other_charsets_as_their_bytes() -> None:
    SEEN.clear()
    rewrite_html_parts(alternative("8bit", "<p>café</p>\r\n"), shout)
    rewrite_html_parts(alternative("8bit", "<p>café</p>\r\n", "iso-8859-1"), shout)
    assert SEEN == [("<p>café</p>\r\n", None), ("<p>caf\xe9</p>\r\n", "iso8859-1")]
    out = rewrite_html_parts(alternative("8bit", "<p>café</p>\r\n", "iso-8859-1"), shout)
    assert "<p data-seen>café</p>" in html_of(out)


def test_a_utf16_part_is_left_alone() -> None:
    raw = alternative("base64", "<p>x</p>", "utf-16")
    assert rewrite_html_parts(raw, shout) is raw


def test_lines_past_998_octets_make_a_7bit_part_quoted_printable() -> None:
    raw = alternative("7bit", "<p>" + "x" * 990 + "</p>\r\n")
    out = rewrite_html_parts(raw, shout)
    part = parse(out).get_body(("html",))
    assert part is not None and part["Content-Transfer-Encoding"] == "quoted-printable"
    assert html_of(out) == "<p data-seen>" + "x" * 990 + "</p>\n"
    assert max(len(line) for line in out.split(b"\r\n")) <= MAX_LINE
    assert out.count(b"Content-Transfer-Encoding") == 1


def test_attachments_and_attached_messages_are_not_rewritten() -> None:
    inner = b"Content-Type: text/html\r\n\r\n<p>inner</p>\r\n"
    raw = (
        b"Subject: s\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="m"\r\n\r\n'
        b'--m\r\nContent-Type: multipart/related; boundary="r"\r\n\r\n'
        b"--r\r\nContent-Type: text/html\r\n\r\n<p>body</p>\r\n--r--\r\n"
        b"--m\r\nContent-Type: text/html\r\nContent-Disposition: attachment; filename=a.html\r\n"
        b"\r\n<p>attached</p>\r\n"
        b"--m\r\nContent-Type: message/rfc822\r\n\r\n" + inner + b"--m--\r\n"
    )
    out = rewrite_html_parts(raw, shout)
    assert out == raw.replace(b"<p>body</p>", b"<p data-seen>body</p>")


def test_a_single_part_html_message_and_lf_line_ends() -> None:
    raw = b"Subject: s\nContent-Type: text/html\n\n<p>only</p>\n"
    assert rewrite_html_parts(raw, shout) == raw.replace(b"<p>", b"<p data-seen>")


def test_structures_that_cannot_be_followed_are_left_alone() -> None:
    broken = [
        b"Subject: s\r\nContent-Type: text/html\r\n",  # no body
        b'Content-Type: multipart/alternative; boundary="b"\r\n\r\n--b\r\n'
        b"Content-Type: text/html\r\n\r\n<p>x</p>\r\n",  # no close delimiter
        b"Content-Type: multipart/alternative\r\n\r\n<p>x</p>\r\n",  # no boundary
        b"Content-Type: text/html\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\n<p>x</p>\r\n",
    ]
    for raw in broken:
        assert rewrite_html_parts(raw, shout) is raw


def test_no_change_returns_the_same_bytes() -> None:
    raw = alternative("quoted-printable")
    assert rewrite_html_parts(raw, lambda text, charset: None) is raw
    assert rewrite_html_parts(raw, lambda text, charset: text) is raw
