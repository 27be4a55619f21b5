"""POST and PATCH /templates bodies parsed at the edge: a field left out is not a field given as
null, and the first problem in record order is the one reported."""

from typing import Any

import pytest

from posthaste.core.models import TemplateVariable, TemplateVersion
from posthaste.core.template_fields import (
    UNCHANGED,
    NewTemplate,
    TemplateChanges,
    parse_new_template,
    parse_template_changes,
)
from posthaste.errors import ValidationError

DRAFT = TemplateVersion("v1", "t1", "Hi", "<p>Hi</p>", "Hi", [TemplateVariable("a", "A")])
NO_BODY = "A template needs 'html' or 'text' (or both)."


def test_a_new_template_takes_defaults_for_what_is_absent_or_null() -> None:
    assert parse_new_template({"name": " Welcome ", "text": "Hi"}) == NewTemplate(
        "Welcome", text="Hi"
    )
    given_null = {"name": "W", "text": "Hi", "alias": None, "subject": None, "variables": None}
    assert parse_new_template(given_null) == NewTemplate("W", text="Hi")
    full = parse_new_template(
        {"name": "W", "alias": "w", "html": "<p/>", "variables": [{"key": "a"}]}
    )
    assert full == NewTemplate("W", "w", None, "<p/>", None, (TemplateVariable("a", None),))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"alias": "Bad", "text": 3}, "'name' is required: 1-200 characters."),
        ({"name": None, "alias": "Bad"}, "'name' must be a string of 1-200 characters."),
        ({"name": "n", "alias": "Bad", "html": 3}, "Invalid 'alias' 'Bad': use 1-64 lowercase "
         "letters, digits, '-' and '_'."),
        ({"name": "n", "html": 3, "text": 4}, "'html' must be a string, got number."),
        ({"name": "n", "text": 4, "variables": 1}, "'text' must be a string, got number."),
        ({"name": "n", "html": None, "variables": 1}, "'variables' must be an array of "
         "{key, fallback_value} objects."),
        ({"name": "n", "html": None}, NO_BODY),
    ],
)  # fmt: skip
def test_the_first_problem_of_a_new_template_is_reported(
    body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_new_template(body)
    assert refused.value.message == message


def test_changes_tell_a_field_left_out_from_one_given_as_null() -> None:
    assert parse_template_changes({}) == TemplateChanges()
    cleared = parse_template_changes({"alias": None, "subject": None, "variables": None})
    assert cleared == TemplateChanges(alias=None, subject=None, variables=())
    assert cleared.name is UNCHANGED and cleared.html is UNCHANGED and cleared.text is UNCHANGED


def test_content_changes_apply_to_the_draft_and_keep_a_body() -> None:
    assert TemplateChanges(name="Renamed").content_of(DRAFT) == DRAFT
    edited = parse_template_changes({"subject": None, "html": None, "variables": []})
    assert edited.content_of(DRAFT) == TemplateVersion("v1", "t1", None, None, "Hi", [])
    with pytest.raises(ValidationError, match="needs 'html' or 'text'"):
        parse_template_changes({"html": None, "text": None}).content_of(DRAFT)
