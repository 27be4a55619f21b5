"""MTA-STS parsing and MX matching (RFC 8461), and the TLS report (RFC 8460), without I/O."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.mta_sts import (
    FAILED_FETCH_PAUSE_MS,
    MAX_AGE_LIMIT,
    NO_POLICY,
    CachedPolicy,
    PolicyError,
    Refresh,
    StsDecision,
    StsMode,
    StsRecord,
    allowed_hosts,
    mx_matches,
    parse_mx_pattern,
    parse_policy,
    parse_record,
    plan_policy,
)
from posthaste.core.tls_reports import (
    PolicyType,
    TlsCount,
    TlsOutcome,
    TlsResult,
    build_report,
    day_of,
    day_start_ms,
    gzip_report,
    parse_tlsrpt,
)
from posthaste.services.mta_sts import session_counts

POLICY = (
    "version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\r\n"
    "mx: *.example.net\r\nmax_age: 86400\r\n"
)
labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


def test_the_txt_record_gives_the_policy_id() -> None:
    assert parse_record(["v=STSv1; id=20160831085700Z;"]).id == "20160831085700Z"  # type: ignore[union-attr]
    assert parse_record(["v=STSv1;id=abc"]).id == "abc"  # type: ignore[union-attr]
    assert parse_record(["v=spf1 -all"]) is None and parse_record([]) is None


@pytest.mark.parametrize(
    ("records", "reason"),
    [
        (["v=STSv1; id=a", "v=STSv1; id=b"], "2 MTA-STS TXT records"),
        (["v=STSv1; id=not-alnum"], "is not 1-32 letters"),
        (["v=STSv1;"], "is not 1-32 letters"),
        (["v=STSv1; id=" + "a" * 33], "is not 1-32 letters"),
        (["v=STSv1; id"], "has no '='"),
    ],
)
def test_a_bad_txt_record_says_why(records: list[str], reason: str) -> None:
    with pytest.raises(PolicyError, match=reason):
        parse_record(records)


def test_a_policy_is_parsed_with_crlf_or_lf_and_unknown_keys() -> None:
    policy = parse_policy(POLICY)
    assert policy.mode is StsMode.ENFORCE and policy.max_age == 86400
    assert policy.mx == ("mail.example.com", "*.example.net")
    relaxed = parse_policy(POLICY.replace("\r\n", "\n") + "extension: yes\n")
    assert relaxed.mx == policy.mx
    assert policy.lines()[0] == "version: STSv1"


def test_max_age_is_capped_at_a_year_and_mode_none_needs_no_mx() -> None:
    assert parse_policy(POLICY.replace("86400", "99999999")).max_age == MAX_AGE_LIMIT
    none = parse_policy("version: STSv1\nmode: none\nmax_age: 0\n")
    assert none.mode is StsMode.NONE and none.mx == ()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("mode: enforce\nmx: a.example\nmax_age: 1\n", "version None"),
        ("version: STSv2\nmode: enforce\nmx: a.example\nmax_age: 1\n", "version 'STSv2'"),
        ("version: STSv1\nmode: strict\nmx: a.example\nmax_age: 1\n", "mode 'strict'"),
        ("version: STSv1\nmode: enforce\nmx: a.example\nmax_age: -1\n", "max_age '-1'"),
        ("version: STSv1\nmode: enforce\nmx: a.example\n", "max_age ''"),
        ("version: STSv1\nmode: testing\nmax_age: 5\n", "at least one mx"),
        ("version: STSv1\nmode: enforce\nmx: *.*.example\nmax_age: 5\n", "not a host name"),
        ("version: STSv1\nmode: enforce\nmx: localhost\nmax_age: 5\n", "not a host name"),
        ("<html>not found</html>\n", "is not 'key: value'"),
    ],
)
def test_a_bad_policy_says_why(text: str, reason: str) -> None:
    with pytest.raises(PolicyError, match=reason):
        parse_policy(text)


def test_mx_matching_follows_rfc_8461() -> None:
    assert mx_matches("mail.example.com", "MAIL.example.com.")
    assert mx_matches("*.example.com", "mx1.example.com")
    assert not mx_matches("*.example.com", "example.com")
    assert not mx_matches("*.example.com", "a.b.example.com")
    assert not mx_matches("mail.example.com", "mail.example.com.evil.test")
    assert allowed_hosts(
        parse_policy(POLICY), ["x.example.net", "mail.example.com", "other.test"]
    ) == [
        "x.example.net",
        "mail.example.com",
    ]


@given(st.lists(labels, min_size=2, max_size=4), labels)
def test_a_wildcard_matches_exactly_one_more_label(names: list[str], extra: str) -> None:
    domain = ".".join(names)
    pattern = parse_mx_pattern("*." + domain)
    assert mx_matches(pattern, f"{extra}.{domain}")
    assert not mx_matches(pattern, domain)
    assert not mx_matches(pattern, f"{extra}.{extra}.{domain}")
    assert mx_matches(parse_mx_pattern(domain.upper() + "."), domain)


@given(st.text(max_size=300))
def test_any_policy_text_parses_or_says_why(text: str) -> None:
    try:
        policy = parse_policy(text)
    except PolicyError as exc:
        assert str(exc)
    else:
        assert 0 <= policy.max_age <= MAX_AGE_LIMIT


def test_tlsrpt_record_gives_its_rua() -> None:
    ruas = parse_tlsrpt(["v=TLSRPTv1; rua=mailto:tls@example.com,https://r.example.com/tls"])
    assert ruas is not None and [(a.scheme, a.uri) for a in ruas] == [
        ("mailto", "mailto:tls@example.com"),
        ("https", "https://r.example.com/tls"),
    ]
    assert parse_tlsrpt(["v=spf1 -all"]) is None
    with pytest.raises(PolicyError, match="no mailto: or https: rua"):
        parse_tlsrpt(["v=TLSRPTv1; rua=ftp://x"])


def test_the_report_counts_sessions_per_policy() -> None:
    policy = parse_policy(POLICY)
    decision = StsDecision(policy, "id1")
    outcomes = [
        TlsOutcome(TlsResult.SUCCESS, "mail.example.com", "192.0.2.1", "198.51.100.7"),
        TlsOutcome(TlsResult.SUCCESS, "mail.example.com", "192.0.2.1", "198.51.100.8"),
        TlsOutcome(
            TlsResult.CERTIFICATE_HOST_MISMATCH, "mail.example.com", "192.0.2.1", "198.51.100.7"
        ),
    ]
    counts = session_counts("2026-11-26", "example.com", decision, outcomes)
    assert sorted((c.result, c.sessions) for c in counts) == [
        (TlsResult.CERTIFICATE_HOST_MISMATCH, 1),
        (TlsResult.SUCCESS, 2),
    ]
    # Successes are counted together whichever address they left from; failures name it.
    assert {(c.result, c.sending_ip) for c in counts} == {
        (TlsResult.SUCCESS, ""),
        (TlsResult.CERTIFICATE_HOST_MISMATCH, "198.51.100.7"),
    }
    counts.append(
        TlsCount("2026-11-26", "example.com", PolicyType.NO_POLICY_FOUND, "", TlsResult.SUCCESS)
    )
    report = build_report(
        "2026-11-26", "example.com", counts, organization="p.test", contact="pm@p.test"
    )
    assert report["date-range"] == {
        "start-datetime": "2026-11-26T00:00:00Z",
        "end-datetime": "2026-11-26T23:59:59Z",
    }
    by_type = {p["policy"]["policy-type"]: p for p in report["policies"]}
    sts = by_type["sts"]
    assert sts["policy"]["mx-host"] == ["mail.example.com", "*.example.net"]
    assert sts["policy"]["policy-string"][1] == "mode: enforce"
    assert sts["summary"] == {"total-successful-session-count": 2, "total-failure-session-count": 1}
    assert sts["failure-details"] == [
        {
            "result-type": "certificate-host-mismatch",
            "sending-mta-ip": "198.51.100.7",
            "receiving-mx-hostname": "mail.example.com",
            "receiving-ip": "192.0.2.1",
            "failed-session-count": 1,
        }
    ]
    assert by_type["no-policy-found"]["summary"]["total-successful-session-count"] == 1
    assert json.loads(gzip.decompress(gzip_report(report))) == report


def test_a_policy_not_fetched_turns_successes_into_fetch_errors() -> None:
    decision = StsDecision(None, "id2", "sts-policy-fetch-error")
    outcomes = [TlsOutcome(TlsResult.SUCCESS, "mx.example.com", "")]
    [count] = session_counts("2026-11-26", "example.com", decision, outcomes)
    assert count.result is TlsResult.STS_POLICY_FETCH_ERROR and count.policy_type is PolicyType.STS


def test_days_are_utc() -> None:
    start = day_start_ms("2026-11-26")
    assert day_of(start) == "2026-11-26" and day_of(start - 1) == "2026-11-25"


NOW = 1_800_000_000_000
DAY = 86_400_000


def cached(record_id: str = "a", *, age: int = 0, max_age: int = DAY) -> CachedPolicy:
    """A policy fetched ``age`` ms ago, valid for ``max_age`` ms."""
    fetched = NOW - age
    return CachedPolicy("example.com", record_id, POLICY, fetched, fetched + max_age)


def failed(record_id: str = "a", *, age: int = 0) -> CachedPolicy:
    fetched = NOW - age
    return CachedPolicy(
        "example.com",
        record_id,
        "",
        fetched,
        fetched + FAILED_FETCH_PAUSE_MS,
        "sts-webpki-invalid",
        "certificate not valid",
    )


@pytest.mark.parametrize(
    ("record", "known", "applies", "refresh"),
    [
        # No record: a live policy stays in force; otherwise none, and nothing to fetch.
        (None, None, "none", Refresh.NONE),
        (None, cached(), "policy a", Refresh.NONE),
        (None, cached(age=2 * DAY), "none", Refresh.NONE),
        # The cached policy applies; renewed in the background for a new id or past half-life.
        ("a", cached(age=DAY // 4), "policy a", Refresh.NONE),
        ("b", cached(age=DAY // 4), "policy a", Refresh.BACKGROUND),
        ("a", cached(age=DAY // 2 + 1), "policy a", Refresh.BACKGROUND),
        # Nothing usable: the mail waits for the first fetch.
        ("a", None, "wait", Refresh.FIRST),
        ("a", cached(age=DAY + 1), "wait", Refresh.FIRST),
        ("b", failed(), "wait", Refresh.FIRST),
        # A failed fetch of this id: no policy, its failure counted; tried again after a pause.
        ("a", failed(), "failed sts-webpki-invalid", Refresh.NONE),
        ("a", failed(age=FAILED_FETCH_PAUSE_MS), "failed sts-webpki-invalid", Refresh.BACKGROUND),
    ],
)
def test_delivery_uses_what_is_cached_and_waits_only_when_nothing_is(
    record: str | None, known: CachedPolicy | None, applies: str, refresh: Refresh
) -> None:
    plan = plan_policy(None if record is None else StsRecord(record), known, NOW)
    decision = plan.decision
    if decision is None:
        shown = "wait"
    elif decision.policy is not None:
        shown = f"policy {decision.record_id}"
    elif decision.fetch_error:
        shown = f"failed {decision.fetch_error}"
    else:
        assert decision == NO_POLICY
        shown = "none"
    assert (shown, plan.refresh) == (applies, refresh)
    assert (plan.refresh is Refresh.FIRST) == (plan.decision is None)
