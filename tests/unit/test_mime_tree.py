"""``read_tree`` builds the tree the stdlib's compat32 parser builds, or declines (``None``)."""

from __future__ import annotations

import base64
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.policy import SMTP, compat32
from email.policy import default as default_policy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posthaste.core.mime_tree import decoded_payload, decoded_size, read_tree
from tests.unit.mime_samples import EOL, generated_message, part, sample, shape

_STDLIB = BytesParser(policy=compat32)


def _tree(raw: bytes) -> Message | None:
    return read_tree(raw)


def _same_or_declined(raw: bytes) -> Message | None:
    tree = _tree(raw)
    if tree is not None:
        assert shape(tree) == shape(_STDLIB.parsebytes(raw))
    # With policy.default (the inbound server's): EmailMessage objects, the same tree.
    emails = read_tree(raw, default_policy)
    assert (emails is None) == (tree is None)
    if emails is not None:
        assert _raw_shape(emails) == _raw_shape(BytesParser(policy=default_policy).parsebytes(raw))
    return tree


def _raw_shape(message: Message) -> Any:
    """``shape`` with the fields as parsed (policy.default reads them only when asked)."""
    payload = message.get_payload()
    body = [_raw_shape(part) for part in payload] if isinstance(payload, list) else payload
    defects = [type(defect).__name__ for defect in message.defects]
    fields = list(message.raw_items())
    return type(message), fields, message.preamble, message.epilogue, defects, body


def test_alternatives_and_an_attachment_are_read_as_the_stdlib_reads_them() -> None:
    tree = _same_or_declined(sample())
    assert tree is not None
    assert [p.get_content_type() for p in tree.walk()] == [
        "multipart/mixed",
        "multipart/alternative",
        "text/plain",
        "text/html",
        "application/pdf",
    ]


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=120)
_NAME = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1)


@st.composite
def _contents(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "subject": draw(_TEXT),
        "text": draw(_TEXT),
        "cte": draw(st.sampled_from([None, "quoted-printable", "base64"])),
        "html": draw(st.none() | _TEXT),
        "image": draw(st.none() | st.binary(max_size=64)),
        "attachments": draw(st.lists(st.tuples(st.binary(max_size=200), _NAME), max_size=2)),
        "crlf": draw(st.booleans()),
    }


def _built(contents: dict[str, Any]) -> bytes:
    """What mail programs send: text, html, an inline image, attachments, the transfer
    encodings the stdlib picks or is told, CRLF or LF."""
    message = EmailMessage()
    message["From"] = "Sender <sender@example.com>"
    message["To"] = "Someone <someone@example.com>"
    message["Subject"] = contents["subject"]
    message.set_content(contents["text"], cte=contents["cte"])
    if contents["html"] is not None:
        message.add_alternative(contents["html"], subtype="html")
        if contents["image"] is not None:
            html = message.get_body(("html",))
            assert isinstance(html, EmailMessage)
            html.add_related(contents["image"], "image", "png", cid="<logo@example.com>")
    for content, filename in contents["attachments"]:
        message.add_attachment(
            content, maintype="application", subtype="octet-stream", filename=filename
        )
    return message.as_bytes(policy=SMTP if contents["crlf"] else default_policy)


@given(contents=_contents())
@settings(max_examples=200, deadline=None)
def test_mail_as_programs_write_it_is_built_here(contents: dict[str, Any]) -> None:
    assert _same_or_declined(_built(contents)) is not None


@given(lines=part(), eol=EOL, final_eol=st.booleans())
@settings(max_examples=400, deadline=None)
def test_any_multipart_is_read_as_the_stdlib_reads_it_or_declined(
    lines: list[str], eol: str, final_eol: bool
) -> None:
    _same_or_declined(generated_message(lines, eol, final_eol))


@given(raw=st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_bytes_are_read_as_the_stdlib_reads_them_or_declined(raw: bytes) -> None:
    _same_or_declined(b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n' + raw)
    _same_or_declined(raw)


_MULTIPART = 'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'


@pytest.mark.parametrize(
    "text",
    [
        "Subject: x\r\n\r\nline one\rline two\r\n",  # a bare CR ends a line for the stdlib
        "Subject : x\r\n\r\nbody\r\n",  # not a header line for the stdlib: the body starts
        " folded first\r\nSubject: x\r\n\r\nbody\r\n",
        _MULTIPART + "--b\r\nContent-Type: text/plain\r\n\r\nno close\r\n",
        _MULTIPART + "no boundary line at all\r\n",
        _MULTIPART + "--b\r\n--b\r\n\r\ntwo boundary lines\r\n--b--\r\n",
        _MULTIPART + "--b--\r\n--b\r\n\r\nafter the close\r\n--b--\r\n",
        _MULTIPART + "--b\r\nContent-Type: message/rfc822\r\n\r\nSubject: in\r\n\r\nx\r\n--b--\r\n",
        'Content-Type: multipart/digest; boundary="b"\r\n\r\n--b\r\n\r\nSubject: x\r\n--b--\r\n',
        "Content-Type: multipart/mixed\r\n\r\n--b\r\n\r\nno boundary parameter\r\n--b--\r\n",
        _MULTIPART.replace("\r\n\r\n", "\r\nContent-Transfer-Encoding: base64\r\n\r\n")
        + "--b\r\n\r\nan encoded multipart: a defect for the stdlib\r\n--b--\r\n",
    ],
)
def test_what_the_stdlib_reads_its_own_way_is_left_to_it(text: str) -> None:
    assert read_tree(text.encode()) is None


def test_eight_bit_text_keeps_its_bytes_as_surrogate_escapes() -> None:
    raw = "Subject: café\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nnaïve\r\n".encode()
    tree = _same_or_declined(raw)
    assert tree is not None
    assert tree.get_payload(decode=True) == "naïve\r\n".encode()


_BASE64ISH = st.text(
    st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\r\n \t.é"),
    max_size=80,
)


@settings(max_examples=300)
@given(
    data=st.binary(max_size=200),
    line=st.integers(1, 90),
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    noise=_BASE64ISH,
    where=st.integers(0, 400),
    cte=st.sampled_from(["base64", "BASE64", "7bit", "quoted-printable"]),
)
def test_decoded_payload_is_what_the_stdlib_decodes(
    data: bytes, line: int, eol: str, noise: str, where: int, cte: str
) -> None:
    encoded = base64.b64encode(data).decode()
    lines = eol.join(encoded[i : i + line] for i in range(0, len(encoded), line)) + eol
    for text in (lines, lines[:where] + noise + lines[where:], noise):
        part, ours = Message(), Message()
        for one in (part, ours):
            one["Content-Transfer-Encoding"] = cte
            one.set_payload(text)
        assert decoded_payload(ours) == part.get_payload(decode=True)
        assert list(map(type, ours.defects)) == list(map(type, part.defects))
        assert decoded_size(ours) == len(part.get_payload(decode=True) or b"")


@settings(max_examples=300)
@given(
    data=st.binary(max_size=200),
    line=st.integers(1, 90),
    eol=st.sampled_from(["\n", "\r\n"]),
    noise=_BASE64ISH,
    where=st.integers(0, 400),
    cte=st.sampled_from(["base64", "BASE64", "7bit", "quoted-printable"]),
)
def test_a_leaf_left_unread_has_the_size_its_payload_decodes_to(
    data: bytes, line: int, eol: str, noise: str, where: int, cte: str
) -> None:
    encoded = base64.b64encode(data).decode()
    lines = eol.join(encoded[i : i + line] for i in range(0, len(encoded), line)) + eol
    for text in (lines, lines[:where] + noise + lines[where:], noise):
        leaf = f"--b{eol}Content-Transfer-Encoding: {cte}{eol}{eol}{text}{eol}--b--{eol}"
        raw = (_MULTIPART + leaf).encode()
        read, unread = read_tree(raw, default_policy), read_tree(raw, default_policy, unread=bool)
        assert (read is None) == (unread is None)
        if read is None or unread is None:
            continue
        [whole], [left] = read.get_payload(), unread.get_payload()
        assert isinstance(whole, Message) and isinstance(left, Message)
        assert decoded_size(left) == decoded_size(whole) == len(decoded_payload(whole) or b"")
        assert decoded_payload(left) == decoded_payload(whole)  # read where it is, if unread
        assert left.get_payload() in ("", whole.get_payload())  # unread, or read as ever


def test_only_well_formed_base64_is_left_unread() -> None:
    raw = sample()
    tree = read_tree(raw, default_policy, unread=lambda part: part.get_content_maintype() != "text")
    assert tree is not None
    pdf, text = tree.get_payload()[1], tree.get_payload()[0].get_payload()[0]
    assert pdf.get_content_type() == "application/pdf" and pdf.get_payload() == ""
    assert decoded_size(pdf) == len(decoded_payload(_STDLIB.parsebytes(raw).get_payload()[1]))
    assert text.get_payload()  # not asked for: read
