"""``classify_report``: what a message to a VERP address says, from real shapes and generated
ones; it never raises."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.reports import RecipientStatus, Report, ReportKind, classify_report
from tests import report_samples as samples


def test_rfc3464s_example_is_a_failed_recipient_with_its_status() -> None:
    report = classify_report(samples.rfc3464_failed())
    assert report.kind is ReportKind.DSN
    assert report.recipients == (
        RecipientStatus("louisl@larry.slip.umd.edu", "failed", "4.0.0", "426 connection timed out"),
    )


def test_gmails_address_not_found() -> None:
    [status] = classify_report(samples.gmail_user_unknown("No.Such@Gmail.com")).recipients
    assert (status.recipient, status.action, status.status) == (
        "no.such@gmail.com",
        "failed",
        "5.1.1",
    )
    assert status.diagnostic.startswith("550-5.1.1 The email account that you tried to reach")


def test_outlooks_report_names_each_recipient() -> None:
    report = classify_report(samples.outlook_ndr(("a@contoso.com", "b@contoso.com")))
    assert [(r.recipient, r.action, r.status) for r in report.recipients] == [
        ("a@contoso.com", "failed", "5.1.10"),
        ("b@contoso.com", "delayed", "4.4.7"),
    ]


def test_arf_complaints_name_the_recipient_where_they_can() -> None:
    rfc = classify_report(samples.rfc5965_arf("user@example.com"))
    assert (rfc.kind, rfc.complainants, rfc.feedback_type) == (
        ReportKind.COMPLAINT,
        ("user@example.com",),
        "abuse",
    )
    yahoo = classify_report(samples.yahoo_arf("someone@yahoo.com"))
    assert (yahoo.kind, yahoo.complainants) == (ReportKind.COMPLAINT, ("someone@yahoo.com",))
    jmrp = classify_report(samples.outlook_jmrp())
    assert jmrp.kind is ReportKind.COMPLAINT
    assert jmrp.complainants == ("removedrecipient@hotmail.com",)  # redacted: matches nobody


def test_auto_replies_and_other_mail_are_told_apart() -> None:
    assert classify_report(samples.out_of_office()).kind is ReportKind.AUTO_REPLY
    assert classify_report(samples.plain_reply()).kind is ReportKind.UNPARSEABLE
    not_abuse = samples.rfc5965_arf().replace(b"Feedback-Type: abuse", b"Feedback-Type: not-spam")
    assert classify_report(not_abuse).kind is ReportKind.UNPARSEABLE
    empty_dsn = samples.rfc3464_failed().replace(b"Action: failed", b"Action: shrugged")
    assert classify_report(empty_dsn).kind is ReportKind.UNPARSEABLE


ADDRESSES = st.from_regex(
    r"[a-z0-9]{1,10}(\.[a-z0-9]{1,5})?@[a-z]{1,8}\.(com|test|org)", fullmatch=True
)
STATUSES = st.tuples(st.sampled_from("245"), st.integers(0, 7), st.integers(0, 20)).map(
    lambda s: f"{s[0]}.{s[1]}.{s[2]}"
)
ACTIONS = st.sampled_from(["failed", "delayed", "delivered", "relayed", "expanded"])


def _dsn(blocks: list[tuple[str, str, str]], text: str) -> bytes:
    """A DSN with a human part holding ``text`` (base64: any text) and the status blocks."""
    fields = "Reporting-MTA: dns; mx.example.com\r\n" + "".join(
        f"\r\nFinal-Recipient: rfc822; {a}\r\nAction: {action}\r\nStatus: {status}\r\n"
        for a, action, status in blocks
    )
    human = base64.encodebytes(text.encode()).decode().replace("\n", "\r\n")
    return (
        f"From: MAILER-DAEMON@mx.example.com\r\nTo: <{samples.VERP}>\r\nSubject: Failure\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Transfer-Encoding: base64\r\n\r\n{human}\r\n"
        f"--b\r\nContent-Type: message/delivery-status\r\n\r\n{fields}\r\n--b--\r\n"
    ).encode()


@given(st.lists(st.tuples(ADDRESSES, ACTIONS, STATUSES), min_size=1, max_size=5), st.text())
def test_every_recipient_block_of_a_generated_dsn_is_read(
    blocks: list[tuple[str, str, str]], text: str
) -> None:
    report = classify_report(_dsn(blocks, text))
    assert report.kind is ReportKind.DSN
    assert [(r.recipient, r.action, r.status) for r in report.recipients] == blocks


@given(st.binary(max_size=2000))
def test_any_bytes_classify_without_raising(raw: bytes) -> None:
    assert isinstance(classify_report(raw), Report)


@given(
    st.sampled_from([samples.rfc3464_failed(), samples.gmail_user_unknown(), samples.yahoo_arf()]),
    st.integers(0, 4000),
    st.binary(max_size=40),
)
def test_damaged_reports_classify_without_raising(raw: bytes, at: int, junk: bytes) -> None:
    assert isinstance(classify_report(raw[:at] + junk + raw[at:]), Report)
