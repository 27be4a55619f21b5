"""Custom headers, subject and tags of a send request (posthaste.core.headers)."""

from __future__ import annotations

import string
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posthaste.core import headers
from posthaste.core.headers import (
    MAX_CUSTOM_HEADERS,
    RESERVED_HEADERS,
    validate_custom_headers,
    validate_subject,
    validate_tags,
)
from posthaste.errors import ValidationError


def _message(call: Callable[..., object], *args: object) -> str:
    """The message of the ValidationError that ``call(*args)`` raises."""
    with pytest.raises(ValidationError) as caught:
        call(*args)
    assert caught.value.name == "validation_error"
    return caught.value.message


# --- custom headers ---------------------------------------------------------------------------


def test_headers_are_copied_with_case_and_order_kept() -> None:
    given_headers = {"X-Entity-Ref-ID": "123", "List-Unsubscribe": "<https://x.test/u>"}
    result = validate_custom_headers(given_headers)
    assert result == given_headers
    assert list(result) == ["X-Entity-Ref-ID", "List-Unsubscribe"]
    assert result is not given_headers


def test_headers_none_is_empty() -> None:
    assert validate_custom_headers(None) == {}


@pytest.mark.parametrize(
    "name",
    ["List-Unsubscribe", "List-Unsubscribe-Post", "In-Reply-To", "References", "X-Mailer"],
)
def test_allowed_headers(name: str) -> None:
    assert validate_custom_headers({name: "v"}) == {name: "v"}


def test_reserved_set_is_lowercase_and_has_the_service_owned_fields() -> None:
    assert all(name == name.lower() for name in RESERVED_HEADERS)
    expected = {
        "from", "to", "cc", "bcc", "subject", "date", "message-id", "mime-version",
        "content-type", "content-transfer-encoding", "content-disposition", "dkim-signature",
        "return-path", "received", "sender", "reply-to",
    }  # fmt: skip
    assert expected <= RESERVED_HEADERS
    assert "list-unsubscribe" not in RESERVED_HEADERS
    assert "list-unsubscribe-post" not in RESERVED_HEADERS


@pytest.mark.parametrize("name", sorted(RESERVED_HEADERS))
def test_every_reserved_header_is_refused_in_any_case(name: str) -> None:
    for spelled in (name, name.upper(), name.title()):
        message = _message(validate_custom_headers, {spelled: "x"})
        assert message.startswith(f"'headers' cannot set {spelled!r}: ")


@pytest.mark.parametrize(
    ("name", "advice"),
    [
        ("Reply-To", "use the 'reply_to' field"),
        ("From", "use the 'from' field"),
        ("Bcc", "use the 'bcc' field"),
        ("Subject", "use the 'subject' field"),
        ("Date", "'scheduled_at'"),
        ("Content-Type", "'html', 'text' and 'attachments'"),
    ],
)
def test_reserved_header_message_points_at_request_field(name: str, advice: str) -> None:
    assert advice in _message(validate_custom_headers, {name: "x"})


def test_posthaste_control_headers_are_refused() -> None:
    message = _message(validate_custom_headers, {"X-Posthaste-Tags": "a=b"})
    assert "'tags'" in message and "'stream_id'" in message


@pytest.mark.parametrize(
    "value",
    ["a\r\nBcc: victim@example.com", "a\nb", "a\rb", "a\x00b", "a\x1bb", "a\x7f", "a\u2028b"],
)
def test_header_injection_is_refused(value: str) -> None:
    message = _message(validate_custom_headers, {"X-Ref": value})
    assert message.startswith("'headers.X-Ref' contains ")
    assert "\r" not in message and "\n" not in message


def test_injection_message_names_cr() -> None:
    message = _message(validate_custom_headers, {"X-Ref": "a\r\nb"})
    assert message == (
        "'headers.X-Ref' contains a control character (CR); "
        "header values must be a single line of text."
    )


def test_tab_and_unicode_are_allowed_in_values() -> None:
    assert validate_custom_headers({"X-A": "a\tb ü 日"}) == {"X-A": "a\tb ü 日"}


@pytest.mark.parametrize("name", ["X Ref", "X:Ref", "", "Ümlaut", "X-\x7f", "X\tRef"])
def test_invalid_header_names(name: str) -> None:
    message = _message(validate_custom_headers, {name: "v"})
    assert message.startswith("'headers' has ")


@pytest.mark.parametrize(("value", "kind"), [(1, "number"), (None, "null"), (["a"], "array")])
def test_header_value_must_be_string(value: object, kind: str) -> None:
    message = _message(validate_custom_headers, {"X-Ref": value})
    assert message == f"'headers.X-Ref' must be a string, got {kind}."


@pytest.mark.parametrize("value", [[], "X-A: 1", 3])
def test_headers_must_be_an_object(value: object) -> None:
    assert "must be an object" in _message(validate_custom_headers, value)


def test_field_name_is_used_in_messages() -> None:
    message = _message(validate_custom_headers, {"To": "x"}, "batch[3].headers")
    assert message.startswith("'batch[3].headers' cannot set 'To'")


def test_header_line_limit_is_998() -> None:
    name = "X-Long"
    fits = "v" * (998 - len(name) - 2)
    assert validate_custom_headers({name: fits}) == {name: fits}
    assert "998" in _message(validate_custom_headers, {name: fits + "v"})


def test_at_most_50_headers() -> None:
    fifty = {f"X-H{index}": "v" for index in range(MAX_CUSTOM_HEADERS)}
    assert len(validate_custom_headers(fifty)) == 50
    message = _message(validate_custom_headers, {**fifty, "X-One-More": "v"})
    assert message == "'headers' has 51 headers; at most 50 are allowed."


def test_same_name_in_two_cases_is_refused() -> None:
    message = _message(validate_custom_headers, {"X-Ref": "1", "x-ref": "2"})
    assert "twice" in message


_header_names = st.text(
    alphabet="".join(chr(code) for code in range(33, 127) if chr(code) != ":"),
    min_size=1,
    max_size=30,
).filter(lambda name: name.lower() not in RESERVED_HEADERS and not name.lower().startswith("x-p"))


def _breaks_a_header(char: str) -> bool:
    """The test's own statement of the rule: C0 except TAB, DEL, C1, U+2028 and U+2029."""
    code = ord(char)
    return char != "\t" and (code < 32 or 127 <= code < 160 or char in "\u2028\u2029")


@settings(max_examples=200)
@given(name=_header_names, value=st.text(max_size=100))
def test_headers_accept_exactly_single_line_values(name: str, value: str) -> None:
    if any(_breaks_a_header(char) for char in value):
        with pytest.raises(ValidationError, match="contains"):
            validate_custom_headers({name: value})
    else:
        assert validate_custom_headers({name: value}) == {name: value}


# --- subject ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "Hello", "Grüße 👋 {{name}}", "a\tb", "x" * 2000])
def test_valid_subjects(value: str) -> None:
    assert validate_subject(value) == value


@pytest.mark.parametrize("value", ["Hi\r\nBcc: x@example.com", "Hi\n", "Hi\x00", "Hi\u2029"])
def test_subject_injection_is_refused(value: str) -> None:
    message = _message(validate_subject, value)
    assert message.startswith("'subject' contains ")


def test_subject_too_long() -> None:
    message = _message(validate_subject, "x" * 2001)
    assert message == "'subject' is 2001 characters long; at most 2000 are allowed."


@pytest.mark.parametrize(("value", "kind"), [(None, "null"), (5, "number"), (True, "boolean")])
def test_subject_must_be_string(value: object, kind: str) -> None:
    assert _message(validate_subject, value) == f"'subject' must be a string, got {kind}."


# --- tags -------------------------------------------------------------------------------------


def test_tags_object_form() -> None:
    tags = {"category": "welcome", "user_id": "42", "A-b_9": ""}
    assert validate_tags(tags) == tags


def test_tags_resend_list_form() -> None:
    tags = [{"name": "category", "value": "welcome"}, {"name": "plan", "value": "pro"}]
    assert validate_tags(tags) == {"category": "welcome", "plan": "pro"}


def test_tags_list_form_ignores_unknown_members() -> None:
    assert validate_tags([{"name": "a", "value": "b", "extra": 1}]) == {"a": "b"}


def test_tags_none_is_empty() -> None:
    assert validate_tags(None) == {}
    assert validate_tags([]) == {}
    assert validate_tags({}) == {}


def test_tags_duplicate_names_in_list_are_refused() -> None:
    tags = [{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]
    assert _message(validate_tags, tags) == "'tags' names 'a' more than once."


@pytest.mark.parametrize(
    ("value", "kind"), [(1, "number"), (True, "boolean"), (None, "null"), ({"x": 1}, "object")]
)
def test_tag_values_are_not_coerced(value: object, kind: str) -> None:
    assert (
        _message(validate_tags, {"count": value}) == f"'tags.count' must be a string, got {kind}."
    )
    list_form = [{"name": "count", "value": value}]
    assert _message(validate_tags, list_form) == (f"'tags[0].value' must be a string, got {kind}.")


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "colon:", "ü", "x" * 257])
def test_invalid_tag_names(name: str) -> None:
    assert _message(validate_tags, {name: "v"}).startswith("Invalid tag name ")
    list_message = _message(validate_tags, [{"name": name, "value": "v"}])
    assert "'tags[0].name'" in list_message


def test_tag_name_of_256_characters_is_allowed() -> None:
    assert validate_tags({"x" * 256: "v"}) == {"x" * 256: "v"}


def test_tag_name_must_be_string_in_list_form() -> None:
    message = _message(validate_tags, [{"name": 7, "value": "v"}])
    assert message == "'tags[0].name' must be a string, got number."


def test_tag_value_length() -> None:
    assert validate_tags({"a": "v" * 256}) == {"a": "v" * 256}
    assert "at most 256" in _message(validate_tags, {"a": "v" * 257})


@pytest.mark.parametrize("value", ["a\r\nb", "a\x00", "a\nb"])
def test_tag_value_control_characters(value: str) -> None:
    assert _message(validate_tags, {"a": value}).startswith("'tags.a' contains a control")


def test_at_most_50_tags() -> None:
    fifty = {f"t{index}": "v" for index in range(50)}
    assert len(validate_tags(fifty)) == 50
    message = _message(validate_tags, {**fifty, "t50": "v"})
    assert message == "'tags' has 51 tags; at most 50 are allowed."


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([{"name": "a"}], "'tags[0]' is missing 'value'."),
        ([{"value": "a"}], "'tags[0]' is missing 'name'."),
        (["a=b"], '\'tags[0]\' must be an object with "name" and "value", got string.'),
    ],
)
def test_malformed_list_entries(value: object, expected: str) -> None:
    assert _message(validate_tags, value) == expected


@pytest.mark.parametrize("value", ["a=b", 3, True])
def test_tags_wrong_type(value: object) -> None:
    assert _message(validate_tags, value).startswith("'tags' must be an object")


_tag_names = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=40)
_tag_values = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=256)


@settings(max_examples=200)
@given(tags=st.dictionaries(_tag_names, _tag_values, max_size=50))
def test_both_tag_forms_agree(tags: dict[str, str]) -> None:
    as_list = [{"name": name, "value": value} for name, value in tags.items()]
    assert validate_tags(tags) == tags
    assert validate_tags(as_list) == tags


def test_the_quick_scan_refuses_exactly_the_characters_checked_one_by_one() -> None:
    """``_check_text`` first scans with one pattern; it must agree on every code point."""
    disagree = [
        hex(code)
        for code in range(0x110000)
        if (headers._FORBIDDEN.search(chr(code)) is not None)
        != headers._is_forbidden_character(chr(code))
    ]
    assert disagree == []
