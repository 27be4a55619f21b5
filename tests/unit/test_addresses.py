"""Parsing, validating and formatting of email addresses (posthaste.core.addresses)."""

from __future__ import annotations

import string

import pytest
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES
from hypothesis import example, given, settings
from hypothesis import strategies as st

from posthaste.core.addresses import Address, parse_address, parse_address_list
from posthaste.errors import ValidationError

# --- accepted forms ---------------------------------------------------------------------------


def test_plain_address() -> None:
    assert parse_address("jane@example.com", "to") == Address(None, "jane", "example.com")


def test_surrounding_whitespace_is_ignored() -> None:
    assert parse_address("  Jane <jane@example.com>  ", "to") == Address(
        "Jane", "jane", "example.com"
    )


def test_display_name_plain() -> None:
    address = parse_address("Jane Doe <jane@example.com>", "from")
    assert address == Address("Jane Doe", "jane", "example.com")


def test_display_name_without_space_before_bracket() -> None:
    assert parse_address("Jane<jane@example.com>", "from").name == "Jane"


def test_display_name_quoted_with_comma() -> None:
    address = parse_address('"Doe, Jane" <jane@example.com>', "from")
    assert address.name == "Doe, Jane"
    assert address.formatted() == '"Doe, Jane" <jane@example.com>'


def test_unquoted_comma_name_is_one_address_and_gets_quoted() -> None:
    address = parse_address("Doe, Jane <jane@example.com>", "from")
    assert address.name == "Doe, Jane"
    assert address.formatted() == '"Doe, Jane" <jane@example.com>'


def test_quoted_name_with_escaped_quote_and_backslash() -> None:
    address = parse_address(r'"Jane \"JD\" D\\oe" <jane@example.com>', "from")
    assert address.name == 'Jane "JD" D\\oe'
    assert parse_address(address.formatted(), "from") == address


def test_angle_brackets_inside_quoted_name_do_not_count() -> None:
    address = parse_address('"Team <ops>" <ops@example.com>', "from")
    assert address.name == "Team <ops>"
    assert address.address == "ops@example.com"


def test_unicode_display_name_is_kept_unquoted() -> None:
    address = parse_address("Jörg Müller <joerg@example.com>", "from")
    assert address.name == "Jörg Müller"
    assert address.formatted() == "Jörg Müller <joerg@example.com>"


def test_bare_angle_address_has_no_name() -> None:
    assert parse_address("<jane@example.com>", "to") == Address(None, "jane", "example.com")


def test_empty_quoted_name_means_no_name() -> None:
    assert parse_address('"" <jane@example.com>', "to").name is None


def test_quoted_name_keeps_inner_spaces() -> None:
    address = parse_address('" Jane " <jane@example.com>', "to")
    assert address.name == " Jane "
    assert address.formatted() == '" Jane " <jane@example.com>'


def test_local_part_case_is_kept_and_domain_lowercased() -> None:
    address = parse_address("Jane.Doe+News@Example.COM", "to")
    assert address.local == "Jane.Doe+News"
    assert address.domain == "example.com"
    assert address.address == "Jane.Doe+News@example.com"


def test_lookup_key_is_lowercased_full_address() -> None:
    address = parse_address("Jane <Jane.Doe@Example.COM>", "to")
    assert address.lookup_key == "jane.doe@example.com"


@pytest.mark.parametrize(
    "value", ["x@simulator.test", "a@example.test", "a@example.com", "a@mail.example"]
)
def test_test_and_example_domains_are_accepted(value: str) -> None:
    assert parse_address(value, "to").address == value


# --- international addresses ------------------------------------------------------------------


def test_idn_domain_becomes_a_label() -> None:
    address = parse_address("user@bücher.de", "to")
    assert address.domain == "xn--bcher-kva.de"
    assert address.address == "user@xn--bcher-kva.de"
    assert address.unicode_domain == "bücher.de"


def test_idn_domain_uppercase_is_mapped() -> None:
    assert parse_address("user@BÜCHER.de", "to").domain == "xn--bcher-kva.de"


def test_a_label_input_round_trips_to_unicode() -> None:
    address = parse_address("user@xn--bcher-kva.de", "to")
    assert address.domain == "xn--bcher-kva.de"
    assert address.unicode_domain == "bücher.de"


def test_ascii_domain_unicode_form_is_itself() -> None:
    assert parse_address("a@example.com", "to").unicode_domain == "example.com"


def test_unicode_local_part_needs_smtputf8() -> None:
    address = parse_address("Jörg@example.com", "to")
    assert address.local == "Jörg"
    assert address.lookup_key == "jörg@example.com"


def test_unicode_local_part_is_nfc_normalized() -> None:
    decomposed = "Jo\u0308rg@example.com"
    assert parse_address(decomposed, "to").local == "J\u00f6rg"


# --- refused forms ----------------------------------------------------------------------------


def _error(value: str, field: str = "to") -> str:
    with pytest.raises(ValidationError) as caught:
        parse_address(value, field)
    return caught.value.message


def test_missing_at_sign_message_names_field_and_value() -> None:
    assert _error("foo") == "Invalid 'to' address \"foo\": missing '@'."


def test_extra_at_sign() -> None:
    assert "more than one '@'" in _error("a@b@example.com")


@pytest.mark.parametrize("value", ["", "   ", "\u3000"])
def test_empty(value: str) -> None:
    assert _error(value, "from") == "'from' must not be empty: give an email address."


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("a@b.com\r\nBcc: x@y.com", "CR"),
        ("a@b.com\nBcc: x@y.com", "LF"),
        ("Jane\r\n <a@b.com>", "CR"),
        ("a@b.com\x00", "NUL"),
        ("Ja\tne <a@b.com>", "TAB"),
        ("a@b.com\x7f", "U+007F"),
        ("Jane\x85 <a@b.com>", "U+0085"),
        ("a@b.com\u2028", "U+2028"),
        ('"Jane\r\n" <a@b.com>', "CR"),
    ],
)
def test_control_characters_anywhere_are_refused(value: str, named: str) -> None:
    message = _error(value)
    assert named in message
    assert "\r" not in message and "\n" not in message


def test_unpaired_surrogate_is_refused_and_not_echoed_raw() -> None:
    message = _error("\ud800@example.com")
    assert "unpaired surrogate" in message
    message.encode("utf-8")


def test_injection_message_shows_escaped_value() -> None:
    message = _error("a@b.com\r\nBcc: x@y.com")
    assert message.startswith("Invalid 'to' address \"a@b.com\\r\\nBcc: x@y.com\"")


def test_too_long() -> None:
    value = "a@" + "b" * 320 + ".com"
    assert "at most 320" in _error(value)


def test_local_part_over_64_characters() -> None:
    assert "too long" in _error("a" * 65 + "@example.com")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("Jane <a@b.com", "unbalanced '<' and '>'"),
        ("a@b.com>", "unbalanced '<' and '>'"),
        ("Jane >a@b.com<", "unbalanced '<' and '>'"),
        ('"Jane <a@b.com>', "unbalanced double quotes"),
        ('Jane" <a@b.com>', "unbalanced double quotes"),
        ("Ja<ne <a@b.com>", "'<' appears more than once"),
        ("Ja>ne <a@b.com>", "'>' appears more than once"),
        ("Jane <a@b.com> extra", "unexpected text after '>'"),
        ("Jane <>", "empty"),
        ('"a b"@example.com', "quoted local parts"),
    ],
)
def test_malformed_brackets_and_quotes(value: str, reason: str) -> None:
    assert reason in _error(value)


@pytest.mark.parametrize(
    "value",
    [
        "a@localhost",
        "a@printer.local",
        "a@x.invalid",
        "a@nodot",
        "a@[127.0.0.1]",
        "a@1.2.3.4",
        "a@-bad.com",
        "a@bad_domain.com",
        "a@xn--zz.com",
        "a@example.com.",
        "a..b@example.com",
        ".a@example.com",
        "a b@example.com",
        "a@",
        "@example.com",
    ],
)
def test_invalid_addr_specs(value: str) -> None:
    message = _error(value)
    assert message.startswith("Invalid 'to' address ")


def test_email_validator_error_is_translated() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_address("a@localhost", "cc")
    assert caught.value.name == "validation_error"
    assert caught.value.message.startswith("Invalid 'cc' address \"a@localhost\": the part")


def test_an_addr_spec_checked_once_is_refused_in_each_field_with_its_own_value() -> None:
    """Addr-specs are validated once whatever they came with; errors still name each use."""
    reasons = set()
    for value, field in (
        ("a@localhost", "to"),
        ("Jo <a@localhost>", "RCPT TO"),
        ("a@localhost", "cc"),
    ):
        with pytest.raises(ValidationError) as caught:
            parse_address(value, field)
        prefix = f"Invalid '{field}' address \"{value}\": "
        assert caught.value.message.startswith(prefix)
        assert caught.value.__cause__ is not None  # email_validator's own error
        reasons.add(caught.value.message.removeprefix(prefix))
    assert len(reasons) == 1


def test_a_valid_addr_spec_keeps_each_values_display_name() -> None:
    assert parse_address("jo@example.com", "to").name is None
    assert parse_address("Jo <jo@example.com>", "to[0]").name == "Jo"
    assert parse_address("jo@example.com", "RCPT TO") == Address(None, "jo", "example.com")


def test_non_string_value() -> None:
    assert _error(42, "from") == "'from' must be an address string, got number."  # type: ignore[arg-type]


# --- lists ------------------------------------------------------------------------------------


def test_list_none_is_empty() -> None:
    assert parse_address_list(None, "cc") == []


def test_list_none_required() -> None:
    with pytest.raises(ValidationError, match="'to' is required"):
        parse_address_list(None, "to", required=True)


def test_list_string_is_one_address_never_comma_split() -> None:
    assert parse_address_list("Doe, Jane <jane@example.com>", "to") == [
        Address("Doe, Jane", "jane", "example.com")
    ]


def test_list_string_with_two_addresses_is_refused() -> None:
    with pytest.raises(ValidationError, match="more than one '@'"):
        parse_address_list("a@example.com, b@example.com", "to")


def test_list_of_strings() -> None:
    result = parse_address_list(["a@example.com", "B <b@example.com>"], "to", required=True)
    assert [a.formatted() for a in result] == ["a@example.com", "B <b@example.com>"]


def test_list_empty_not_required() -> None:
    assert parse_address_list([], "bcc") == []


def test_list_empty_required() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_address_list([], "to", required=True)
    assert caught.value.message == "'to' must name at least one recipient."


@pytest.mark.parametrize(("item", "kind"), [(None, "null"), (3, "number"), ({}, "object")])
def test_list_non_string_item_names_index(item: object, kind: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_address_list(["a@example.com", "b@example.com", item], "to")
    assert caught.value.message == f"'to[2]' must be an address string, got {kind}."


def test_list_invalid_item_names_index() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_address_list(["a@example.com", "nope"], "cc")
    assert caught.value.message == "Invalid 'cc[1]' address \"nope\": missing '@'."


@pytest.mark.parametrize("value", [3, {"email": "a@example.com"}, True])
def test_list_wrong_type(value: object) -> None:
    with pytest.raises(ValidationError, match="must be an address string or an array"):
        parse_address_list(value, "to")


# --- formatting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (None, "a@example.com"),
        ("Jane", "Jane <a@example.com>"),
        ("Jane Q. Doe", '"Jane Q. Doe" <a@example.com>'),
        ("ops@example.com", '"ops@example.com" <a@example.com>'),
        ('Say "hi"', '"Say \\"hi\\"" <a@example.com>'),
        ("back\\slash", '"back\\\\slash" <a@example.com>'),
        ("Zoë", "Zoë <a@example.com>"),
    ],
)
def test_formatted_quotes_specials(name: str | None, expected: str) -> None:
    address = Address(name, "a", "example.com")
    assert address.formatted() == expected
    assert parse_address(expected, "to") == address


def test_formatted_uses_ascii_domain() -> None:
    address = parse_address("Zoë <zoë@bücher.de>", "to")
    assert address.formatted() == "Zoë <zoë@xn--bcher-kva.de>"
    assert parse_address(address.formatted(), "to") == address


def test_address_is_immutable_and_hashable() -> None:
    address = parse_address("a@example.com", "to")
    with pytest.raises(AttributeError):
        address.local = "b"  # type: ignore[misc]
    assert {address, parse_address("a@example.com", "to")} == {address}


# --- properties -------------------------------------------------------------------------------

_ATEXT = string.ascii_letters + string.digits + "!#$%&'*+-/=?^_`{|}~"
_atoms = st.text(alphabet=_ATEXT + "éøßж", min_size=1, max_size=10)
_local_parts = st.lists(_atoms, min_size=1, max_size=3).map(".".join)
_labels = st.text(alphabet=string.ascii_lowercase + string.digits + "üöéñ", min_size=1, max_size=12)
_domains = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(_labels, min_size=1, max_size=3),
    st.sampled_from(["com", "de", "test", "org", "example"]),
)
_names = st.one_of(
    st.none(),
    st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=40).filter(
        str.strip
    ),
)


@settings(max_examples=300)
@given(name=_names, local=_local_parts, domain=_domains)
@example(name="Doe, Jane", local="jane", domain="example.com")
@example(name='"', local="a", domain="bücher.de")
def test_formatted_round_trip(name: str | None, local: str, domain: str) -> None:
    bare = parse_address(f"{local}@{domain}", "to")
    address = Address(name, bare.local, bare.domain)
    assert parse_address(address.formatted(), "to") == address
    assert parse_address(address.address, "to") == bare
    assert parse_address(f"{bare.local}@{bare.unicode_domain}", "to") == bare


@settings(max_examples=300)
@given(local=_local_parts, domain=_domains)
def test_generated_valid_addresses_parse(local: str, domain: str) -> None:
    address = parse_address(f"{local}@{domain}", "to")
    assert address.local == local
    assert address.unicode_domain == domain
    assert address.domain.isascii() and address.domain == address.domain.lower()
    assert address.lookup_key == address.address.lower()


_tricky = st.text(alphabet='<>"\\@., \r\n\t\x00aZ9ü-xn\u2028日', max_size=40)


@settings(max_examples=500)
@given(value=st.one_of(st.text(max_size=400), _tricky))
@example(value="\ud800@x.com")
@example(value="a@" + "ü" * 70 + ".com")
def test_parse_address_raises_only_validation_error(value: str) -> None:
    try:
        address = parse_address(value, "to")
    except ValidationError as exc:
        assert exc.message.startswith(("Invalid 'to' address", "'to' must"))
        exc.message.encode("utf-8")
    else:
        assert parse_address(address.formatted(), "to") == address


# The common address is checked with its domain validated once per domain (``_checked_plain``);
# it must say what email_validator says of the whole address, or leave the address to it.
_plain_locals = st.one_of(
    _local_parts,
    st.text(alphabet=_ATEXT + ".", min_size=1, max_size=70),  # dots anywhere, lengths near 64
    st.sampled_from(["Postmaster", "ABUSE", "hostmaster", "x" * 64, "x" * 65]),
)
_plain_domains = st.one_of(
    _domains,
    st.text(alphabet=string.ascii_letters + string.digits + ".-_ü[]()<> \t", max_size=30),
    st.sampled_from(["localhost", "x.local", "a.invalid", "[1.2.3.4]", "EXAMPLE.COM", "ü.de"]),
    st.integers(min_value=150, max_value=260).map(lambda n: ("a" * 60 + ".") * (n // 61) + "com"),
)


@settings(max_examples=1000)
@given(local=_plain_locals, domain=_plain_domains)
@example(local="a" * 64, domain=("b" * 62 + ".") * 3 + "com")  # 253 characters in all: too long
@example(local="a" * 60, domain=("b" * 62 + ".") * 3 + "de")  # 252
@example(local="Postmaster", domain="example.com")  # email_validator lowercases it
def test_plain_addresses_are_checked_as_email_validator_checks_them(
    local: str, domain: str
) -> None:
    from posthaste.core.addresses import _checked_plain, _validated

    full = _validated(f"{local}@{domain}")
    fast = _checked_plain(local, domain)
    assert fast is None or fast == full
    lowercased = local.lower() in CASE_INSENSITIVE_MAILBOX_NAMES  # left to email_validator
    if local.isascii() and isinstance(full, tuple) and len(local) < 50 and not lowercased:
        assert fast == full  # the common case does take the shortcut
