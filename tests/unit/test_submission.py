"""Reading a relay submission into a send request, keeping the submitted MIME."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posthaste import errors
from posthaste.core.send_request import SendRequest
from posthaste.core.submission import parse_submission, with_message_id
from posthaste.smtp.replies import INTERNAL, reply_for, reply_line

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def mime(**headers: str) -> bytes:
    message = EmailMessage()
    message["From"] = "Acme <hello@acme.test>"
    message["To"] = "Ann <ann@example.com>, bob@example.com"
    message["Subject"] = "Hello"
    message["Message-ID"] = "<m1@acme.test>"
    message["Date"] = "Mon, 23 Nov 2026 11:00:00 +0000"
    for name, value in headers.items():
        name = name.replace("_", "-")
        del message[name]
        if value:
            message[name] = value
    message.set_content("Hi there\n")
    message.add_alternative("<p>Hi there</p>", subtype="html")
    message.set_boundary("=_b1")
    return message.as_bytes(policy=email.policy.SMTP)


def test_headers_give_the_fields_and_the_envelope_gives_bcc() -> None:
    raw = mime(Cc="carol@example.com", Reply_To="help@acme.test")
    rcpts = ["ann@example.com", "carol@example.com", "hidden@example.com"]
    request = parse_submission(raw, rcpts, NOW).request
    assert request.from_.formatted() == "Acme <hello@acme.test>"
    assert [a.formatted() for a in request.to] == ["Ann <ann@example.com>"]
    assert [a.address for a in request.cc] == ["carol@example.com"]
    assert [a.address for a in request.bcc] == ["hidden@example.com"]
    assert [a.address for a in request.reply_to] == ["help@acme.test"]
    assert request.subject == "Hello" and request.text == "Hi there\n"
    assert request.html == "<p>Hi there</p>\n" and request.attachments == []
    assert request.raw == raw and request.message_id == "<m1@acme.test>"


def test_control_headers_are_read_and_removed_byte_for_byte() -> None:
    plain = mime()
    raw = mime(
        X_Posthaste_Tags="plan=pro, kind=welcome",
        X_Posthaste_Stream="broadcast",
        X_Posthaste_Idempotency_Key="order-42",
    )
    submission = parse_submission(raw, ["ann@example.com"], NOW)
    assert submission.request.tags == {"plan": "pro", "kind": "welcome"}
    assert submission.request.stream_id == "broadcast"
    assert submission.idempotency_key == "order-42"
    assert kept(submission.request) == plain
    assert b"posthaste" not in kept(submission.request).lower()
    assert submission.request.raw is raw  # the submitted bytes kept where they are


def kept(request: SendRequest) -> bytes:
    """The message the send path keeps (``_kept_raw``, less the lines it adds itself)."""
    assert request.raw is not None
    return request.raw_top + request.raw[request.raw_from :]


def test_a_bcc_header_is_not_kept() -> None:
    raw = mime(Bcc="secret@example.com")
    request = parse_submission(raw, ["ann@example.com", "secret@example.com"], NOW).request
    assert [a.address for a in request.bcc] == ["secret@example.com"]
    assert kept(request) == mime() and b"secret" not in kept(request)


def test_a_missing_date_is_added_on_top_and_a_missing_message_id_left_to_the_send_path() -> None:
    raw = mime(Message_ID="", Date="")
    request = parse_submission(raw, ["ann@example.com"], NOW).request
    # No id of its own: the send path gives it the email's (<email id@from domain>).
    assert request.message_id is None
    # The Date goes on top of the submitted bytes, kept apart: the message is not copied.
    assert request.raw is raw and request.raw_top == b"Date: Mon, 23 Nov 2026 12:00:00 +0000\r\n"
    assert with_message_id(request.raw_top, "<e1@acme.test>") == (
        b"Message-ID: <e1@acme.test>\r\n" + request.raw_top
    )


def test_a_missing_date_goes_on_top_of_a_message_whose_header_lost_fields() -> None:
    raw = mime(Date="", Bcc="secret@example.com", X_Posthaste_Tags="a=1")
    request = parse_submission(raw, ["ann@example.com"], NOW).request
    date = b"Date: Mon, 23 Nov 2026 12:00:00 +0000\r\n"
    assert request.raw_top.startswith(date)  # then the header lines kept, the body in place
    assert kept(request) == date + mime(Date="") and request.tags == {"a": "1"}
    assert request.raw is raw


def test_envelope_recipients_are_the_to_when_no_header_names_them() -> None:
    request = parse_submission(mime(), ["member@example.com"], NOW).request
    assert [a.address for a in request.to] == ["member@example.com"] and request.bcc == []


def test_attachments_and_inline_parts_are_recorded() -> None:
    message = email.message_from_bytes(mime(), policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    html = message.get_body(preferencelist=("html",))
    assert html is not None
    html.add_related(b"\x89PNG", "image", "png", cid="<logo@acme>")
    message.add_attachment(b"%PDF-1.4", "application", "pdf", filename="invoice.pdf")
    request = parse_submission(message.as_bytes(), ["ann@example.com"], NOW).request
    found = [(a.filename, a.content_type, a.content, a.content_id) for a in request.attachments]
    assert found == [
        ("part-3", "image/png", b"\x89PNG", "logo@acme"),
        ("invoice.pdf", "application/pdf", b"%PDF-1.4", None),
    ]
    assert request.text == "Hi there\n"


def test_attachments_are_decoded_from_the_message_s_bytes_as_the_stdlib_decodes_them() -> None:
    message = email.message_from_bytes(mime(), policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    message.add_attachment(bytes(range(256)) * 300, "application", "octet-stream", filename="a")
    message.add_attachment("Notes\n", filename="notes.txt", cte="base64")  # a text attachment
    message.add_attachment(b"=\x00", "application", "x-odd", cte="quoted-printable")
    raw = message.as_bytes(policy=email.policy.SMTP)
    request = parse_submission(raw, ["ann@example.com"], NOW).request
    stdlib = email.message_from_bytes(raw, policy=email.policy.default)
    expected = [part.get_payload(decode=True) for part in stdlib.iter_attachments()]
    assert [a.content for a in request.attachments] == expected
    assert request.text == "Hi there\n" and request.html == "<p>Hi there</p>\n"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (mime(From=""), "From header"),
        (mime(From="a@acme.test, b@acme.test"), "exactly one"),
        (mime(X_Posthaste_Tags="no-equals-sign"), "name=value"),
        (mime(X_Posthaste_Tags="bad name=1"), "tag"),
        (b"not a header\r\n\r\nbody\r\n", "malformed"),
    ],
)
def test_invalid_submissions_say_what_is_wrong(raw: bytes, words: str) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        parse_submission(raw, ["ann@example.com"], NOW)
    assert words in caught.value.message


def test_the_fingerprint_follows_the_bytes_and_the_recipients() -> None:
    one = parse_submission(mime(), ["ann@example.com"], NOW).fingerprint
    assert one == parse_submission(mime(), ["ANN@example.com"], NOW).fingerprint
    assert one != parse_submission(mime(), ["bob@example.com"], NOW).fingerprint
    assert one != parse_submission(mime(Subject="Other"), ["ann@example.com"], NOW).fingerprint


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (errors.InvalidApiKey(), "535 5.7.8"),
        (errors.DomainNotVerified(), "550 5.7.1"),
        (errors.DomainNotOwned(), "550 5.7.1"),
        (errors.RecipientSuppressed(), "550 5.1.1"),
        (errors.ValidationError(), "554 5.6.0"),
        (errors.PayloadTooLarge(), "552 5.3.4"),
        (errors.RateLimitExceeded(retry_after=1, limit=1, reset=1), "451 4.7.1"),
        (errors.DailyQuotaExceeded(retry_after=1, limit=1, reset=1), "452 4.5.3"),
        (errors.ServiceUnavailable(), "451 4.3.0"),
        (OSError("database down"), "451 4.3.0"),
    ],
)
def test_every_error_has_its_reply(error: BaseException, line: str) -> None:
    assert reply_line(error).startswith(line + " ")


def test_internal_errors_do_not_leak_their_text() -> None:
    assert reply_for(RuntimeError("secret dsn")) is INTERNAL
    assert "secret" not in reply_line(RuntimeError("secret dsn"))
    assert reply_line(errors.ValidationError("bad\r\nline é")) == "554 5.6.0 bad line ?"


def test_encoded_and_raw_utf8_headers_and_odd_charsets_are_read() -> None:
    raw = (
        "From: =?utf-8?q?Caf=C3=A9?= <café@acme.test>\r\n"
        "To: ann@example.com\r\n"
        "Subject: =?utf-8?b?w6l0w6k=?= report\r\n"
        "Content-Type: text/plain; charset=x-unknown\r\n"
        "\r\n"
        "caf\xe9\r\n"
    ).encode()
    request = parse_submission(raw, ["ann@example.com"], NOW).request
    assert request.from_.formatted() == "Café <café@acme.test>"
    assert request.subject == "été report" and request.text == "café\n"


_NAMES = st.from_regex(r"X-[A-Za-z][A-Za-z0-9-]{0,20}", fullmatch=True).filter(
    lambda name: not name.lower().startswith("x-posthaste-")
)
_VALUES = st.from_regex(r"[!-~]([ !-~]{0,60}[!-~])?", fullmatch=True)
_BODY_LINES = st.lists(st.from_regex(r"[ -~]{0,76}", fullmatch=True), max_size=8)


@given(
    extra=st.lists(st.tuples(_NAMES, _VALUES), max_size=6),
    position=st.integers(min_value=0, max_value=10),
    folded=st.booleans(),
    body=_BODY_LINES,
)
def test_only_the_control_lines_leave_the_message(
    extra: list[tuple[str, str]], position: int, folded: bool, body: list[str]
) -> None:
    lines = [
        "From: hello@acme.test\r\n",
        "To: ann@example.com\r\n",
        "Subject: Hi\r\n",
        "Message-ID: <p@acme.test>\r\n",
        "Date: Mon, 23 Nov 2026 11:00:00 +0000\r\n",
        *(f"{name}: {value}\r\n" for name, value in extra),
    ]
    control = "X-Posthaste-Tags: a=1,\r\n b=2\r\n" if folded else "X-Posthaste-Tags: a=1, b=2\r\n"
    with_control = [*lines[: position % (len(lines) + 1)], control]
    with_control += lines[position % (len(lines) + 1) :]
    text = "".join(line + "\r\n" for line in body)
    submitted = ("".join(with_control) + "\r\n" + text).encode()
    request = parse_submission(submitted, ["ann@example.com"], NOW).request
    assert kept(request) == ("".join(lines) + "\r\n" + text).encode()
    assert request.tags == {"a": "1", "b": "2"}


_ATEXT = "abcXYZ019!#$%&'*+/=?^_`{|}~-"
_atoms = st.text(alphabet=_ATEXT, min_size=1, max_size=6)
_addr_specs = st.builds(
    lambda local, domain: f"{'.'.join(local)}@{'.'.join(domain)}",
    st.lists(_atoms, min_size=1, max_size=3),
    st.lists(st.text(alphabet="ab-09", min_size=1, max_size=5), min_size=1, max_size=3),
)
_mailbox_texts = st.one_of(
    _addr_specs,
    st.builds(  # Name <addr>, "Name" <addr>, <addr>, with any spacing
        lambda name, space, addr: f"{name}{space}<{addr}>",
        st.one_of(
            st.just(""),
            st.lists(_atoms, min_size=1, max_size=3).map(" ".join),
            st.text(alphabet=_ATEXT + ' ,.;:<>@()[]\\"', max_size=10).map(lambda t: f'"{t}"'),
            st.text(alphabet=_ATEXT + " \t.", max_size=12),
        ),
        st.sampled_from(["", " ", "  ", "\t"]),
        _addr_specs,
    ),
    st.text(alphabet=_ATEXT + ' \t<>@.,;:"()[]\\', max_size=30),  # anything at all
)


@settings(max_examples=500)
@given(text=_mailbox_texts)
def test_mailboxes_are_read_as_getaddresses_reads_them(text: str) -> None:
    from email.utils import getaddresses

    from posthaste.core.submission import _mailbox_pairs

    assert _mailbox_pairs(text) == getaddresses([text])
