"""Domain names, the record set, and how checks move a domain's status (no I/O)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.domains import (
    GRACE_MS,
    HOUR_MS,
    DnsRecord,
    Domain,
    Lookups,
    RecordStatus,
    apply_check,
    new_selector,
    next_check_in,
    parse_domain_name,
    records_for,
    split_txt,
    tracking_host,
    tracking_subdomain,
    with_receiving,
    with_tracking,
)
from posthaste.errors import ValidationError

KEY = "A" * 392  # the length of a 2048-bit key's base64 SubjectPublicKeyInfo
T0 = 1_800_000_000_000


@pytest.mark.parametrize(
    ("given_name", "expected"),
    [
        ("example.com", "example.com"),
        ("  Example.COM.  ", "example.com"),
        ("Bücher.Example", "xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("mail.acme.test", "mail.acme.test"),
        ("a-b.c-d.example", "a-b.c-d.example"),
    ],
)
def test_names_are_normalised_to_lowercase_a_labels(given_name: str, expected: str) -> None:
    assert parse_domain_name(given_name) == expected


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("192.0.2.1", "IP address"),
        ("[2001:db8::1]", "IP address"),
        ("localhost", "single label"),
        ("mail.localhost", ".localhost"),
        ("printer.local", ".local"),
        ("1.in-addr.arpa", ".arpa"),
        ("example", "single label"),
        ("a" * 64 + ".com", "Label too long"),
        (("a" * 60 + ".") * 5 + "com", "Domain too long"),
        ("exa mple.com", "whitespace"),
        ("-bad.com", "hyphen"),
        ("under_score.com", "U\\+005F"),
        ("example.123", "numeric"),
        ("a..com", "valid domain"),
        ("", "required"),
    ],
)
def test_names_that_cannot_send_mail_are_refused(bad: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        parse_domain_name(bad)


def test_a_non_string_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="got number"):
        parse_domain_name(42)


REFUSED_TLDS = {"localhost", "local", "invalid", "onion", "arpa"}
NAMES = st.from_regex(r"[a-z][a-z0-9]{0,20}(\.[a-z][a-z0-9]{0,20}){1,3}", fullmatch=True)


@given(NAMES.filter(lambda name: name.rsplit(".", 1)[-1] not in REFUSED_TLDS))
def test_parsing_is_idempotent(name: str) -> None:
    once = parse_domain_name(name)
    assert parse_domain_name(once) == once == name


def test_selectors_are_ph_and_random() -> None:
    selectors = {new_selector() for _ in range(50)}
    assert len(selectors) == 50
    assert all(s.startswith("ph") and len(s) == 12 and s.isalnum() for s in selectors)


def test_the_record_set_follows_product_section_7() -> None:
    records = records_for(
        "acme.test", "phsel", KEY, mx_host="mx.ph.test", spf_include="_spf.ph.test", receiving=True
    )
    assert [(r.record, r.type, r.name, r.priority) for r in records] == [
        ("DKIM", "TXT", "phsel._domainkey.acme.test", None),
        ("SPF", "MX", "send.acme.test", 10),
        ("SPF", "TXT", "send.acme.test", None),
        ("DMARC", "TXT", "_dmarc.acme.test", None),
        ("Receiving", "MX", "acme.test", 10),
    ]
    assert records[0].value == f"v=DKIM1; k=rsa; p={KEY}"
    assert records[1].value == "mx.ph.test"
    assert records[2].value == "v=spf1 include:_spf.ph.test ~all"
    assert all(r.status is RecordStatus.NOT_STARTED for r in records)


def test_long_txt_values_split_into_255_byte_strings_for_zone_files() -> None:
    record = DnsRecord("DKIM", "TXT", "s._domainkey.a.test", f"v=DKIM1; k=rsa; p={KEY}")
    parts = split_txt(record.value)
    assert [len(p) for p in parts] == [255, len(record.value) - 255]
    assert "".join(parts) == record.value
    assert record.zone_value == f'"{parts[0]}" "{parts[1]}"'
    mx = DnsRecord("SPF", "MX", "send.a.test", "mx.ph.test", priority=10)
    assert mx.zone_value == "10 mx.ph.test."


def _domain(**changes: object) -> Domain:
    records = records_for(
        "acme.test", "phsel", KEY, mx_host="mx.ph.test", spf_include="_spf.ph.test", receiving=False
    )
    base = Domain(
        id="d1",
        team_id="t1",
        name="acme.test",
        region="us-east-1",
        status=RecordStatus.NOT_STARTED,
        records=records,
        dkim_selector="phsel",
        key_provider="local",
        open_tracking=False,
        click_tracking=False,
        tls="opportunistic",
        receiving=False,
        created_at=T0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _published(domain: Domain, *, without: str | None = None) -> Lookups:
    found: dict[tuple[str, str], list[str]] = {}
    for record in domain.records:
        if record.record == without:
            found.setdefault((record.name, record.type), [])
            continue
        found.setdefault((record.name, record.type), []).append(record.value)
    return {key: values for key, values in found.items()}


def test_all_required_records_published_verifies() -> None:
    domain = _domain()
    result = apply_check(domain, _published(domain, without="DMARC"), T0)
    assert result.status is RecordStatus.VERIFIED
    assert result.verified_at == T0 and result.checking_since is None
    statuses = {r.record + r.type: r.status for r in result.records}
    assert statuses["DMARCTXT"] is RecordStatus.PENDING  # advice only
    assert next_check_in(result, T0) == 24 * HOUR_MS


def test_a_missing_record_is_pending_then_failed_after_72_hours() -> None:
    domain = _domain()
    first = apply_check(domain, _published(domain, without="DKIM"), T0)
    assert first.status is RecordStatus.PENDING and first.checking_since == T0
    domain = replace(domain, status=first.status, checking_since=first.checking_since)
    later = apply_check(domain, _published(domain, without="DKIM"), T0 + GRACE_MS - 1)
    assert later.status is RecordStatus.PENDING
    assert next_check_in(later, T0 + GRACE_MS - 1) == 60_000
    end = apply_check(domain, _published(domain, without="DKIM"), T0 + GRACE_MS)
    assert end.status is RecordStatus.FAILED
    assert [r.status for r in end.records if r.record == "DKIM"] == [RecordStatus.FAILED]
    assert next_check_in(end, T0 + GRACE_MS) is None


def test_a_vanished_record_is_a_temporary_failure_until_the_grace_runs_out() -> None:
    verified = _domain(status=RecordStatus.VERIFIED, verified_at=T0)
    lost = apply_check(verified, _published(verified, without="SPF"), T0 + HOUR_MS)
    assert lost.status is RecordStatus.TEMPORARY_FAILURE
    assert lost.verified_at == T0  # still usable during the grace period
    assert lost.checking_since == T0 + HOUR_MS
    spf = [r.status for r in lost.records if r.record == "SPF"]
    assert spf == [RecordStatus.TEMPORARY_FAILURE, RecordStatus.TEMPORARY_FAILURE]
    failing = replace(verified, status=lost.status, checking_since=lost.checking_since)
    end = apply_check(failing, _published(failing, without="SPF"), T0 + HOUR_MS + GRACE_MS)
    assert end.status is RecordStatus.FAILED and end.verified_at is None


def test_a_record_back_in_time_verifies_again_and_keeps_the_first_verification() -> None:
    failing = _domain(
        status=RecordStatus.TEMPORARY_FAILURE, verified_at=T0, checking_since=T0 + HOUR_MS
    )
    back = apply_check(failing, _published(failing), T0 + 2 * HOUR_MS)
    assert back.status is RecordStatus.VERIFIED and back.verified_at == T0


def test_no_dns_answer_is_a_temporary_failure() -> None:
    domain = _domain()
    result = apply_check(domain, {record.key: None for record in domain.records}, T0)
    assert result.status is RecordStatus.TEMPORARY_FAILURE
    assert {r.status for r in result.records} == {RecordStatus.TEMPORARY_FAILURE}
    assert next_check_in(result, T0) == 60_000


def test_a_failed_domain_checked_again_starts_a_new_window() -> None:
    failed = _domain(status=RecordStatus.FAILED, checking_since=T0)
    again = apply_check(failed, _published(failed, without="DKIM"), T0 + 5 * GRACE_MS)
    assert again.status is RecordStatus.PENDING
    assert again.checking_since == T0 + 5 * GRACE_MS


@pytest.mark.parametrize(
    ("elapsed", "delay"),
    [(0, 60_000), (30 * 60_000, 300_000), (2 * HOUR_MS, 900_000), (10 * HOUR_MS, HOUR_MS)],
)
def test_rechecks_back_off(elapsed: int, delay: int) -> None:
    domain = _domain(status=RecordStatus.PENDING, checking_since=T0)
    result = apply_check(domain, _published(domain, without="DKIM"), T0 + elapsed)
    assert next_check_in(result, T0 + elapsed) == delay


def test_the_last_recheck_lands_on_the_72_hour_mark() -> None:
    domain = _domain(status=RecordStatus.PENDING, checking_since=T0)
    now = T0 + GRACE_MS - 10 * 60_000
    result = apply_check(domain, _published(domain, without="DKIM"), now)
    assert next_check_in(result, now) == 10 * 60_000


def test_a_record_added_while_dns_was_asked_keeps_its_status_until_the_next_check() -> None:
    domain = _domain()
    lookups = _published(domain)
    grown = replace(domain, records=with_receiving(domain, True, "mx.ph.test"))
    result = apply_check(grown, lookups, T0)
    assert result.status is RecordStatus.VERIFIED
    assert result.records[-1].record == "Receiving"
    assert result.records[-1].status is RecordStatus.NOT_STARTED


DOMAINISH = st.text(alphabet="abcXY09.-_ü\u00df\u200d\u3002 \ud800\x00", max_size=80)


@given(st.text(max_size=300) | DOMAINISH)
def test_any_text_is_a_valid_name_or_a_validation_error(text: str) -> None:
    try:
        name = parse_domain_name(text)
    except ValidationError as exc:
        assert exc.message.startswith("'name'")
        return
    assert name == name.lower() and name.isascii() and 3 <= len(name) <= 253
    assert parse_domain_name(name) == name


def test_a_tracking_subdomain_is_a_cname_used_only_once_verified() -> None:
    domain = _domain()
    assert tracking_subdomain(domain) is None and tracking_host(domain) is None
    records = with_tracking(domain, "links", "ph.example.net")
    [cname] = [r for r in records if r.record == "Tracking"]
    assert (cname.type, cname.name, cname.value, cname.zone_value) == (
        "CNAME",
        "links.acme.test",
        "ph.example.net",
        "ph.example.net.",
    )
    assert not cname.required  # sending does not wait for it
    tracked = replace(domain, records=records)
    assert tracking_subdomain(tracked) == "links" and tracking_host(tracked) is None
    lookups = {**_published(domain), ("links.acme.test", "CNAME"): ["PH.example.net."]}
    checked = apply_check(tracked, lookups, T0)
    assert checked.status is RecordStatus.VERIFIED
    assert tracking_host(replace(tracked, records=checked.records)) == "links.acme.test"
    wrong = apply_check(tracked, {**lookups, ("links.acme.test", "CNAME"): ["elsewhere.test"]}, T0)
    assert tracking_host(replace(tracked, records=wrong.records)) is None
    assert with_tracking(tracked, None, "ph.example.net") == domain.records
