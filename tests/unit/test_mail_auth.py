"""The Authentication-Results field we write (RFC 8601), and the forged ones we drop."""

from __future__ import annotations

from posthaste.core.mail_auth import Authentication, results_field, without_ours

RESULTS = Authentication(
    dkim="pass",
    dmarc="pass",
    mail_from="a b@example.org",
    dkim_domain="example.org",
    dkim_selector="s1",
    from_domain="example.org",
)


def test_the_field_names_each_method_and_what_it_checked() -> None:
    assert RESULTS.header_value("mx.test") == (
        'mx.test; spf=none smtp.mailfrom="a b@example.org"; dkim=pass header.d=example.org'
        " header.s=s1; dmarc=pass header.from=example.org"
    )
    assert Authentication().header_value("mx.test") == "mx.test; spf=none; dkim=none; dmarc=none"


def test_a_field_claiming_our_name_is_dropped_and_others_are_kept() -> None:
    theirs = b"Authentication-Results: mx.other; dkim=pass\r\n"
    forged = b"authentication-results:  MX.test ;\r\n dkim=pass\r\n\tdmarc=pass\r\n"
    raw = theirs + forged + b"Subject: hi\r\n\r\nAuthentication-Results: mx.test; in the body\r\n"
    field = results_field("mx.test", Authentication())
    assert field == b"Authentication-Results: mx.test; spf=none; dkim=none; dmarc=none\r\n"
    assert without_ours(raw, "mx.test") == (
        theirs + b"Subject: hi\r\n\r\nAuthentication-Results: mx.test; in the body\r\n"
    )
    unclaimed = b"Subject: x\r\n\r\n"
    assert without_ours(unclaimed, "mx.test") is unclaimed  # nothing forged: no copy
