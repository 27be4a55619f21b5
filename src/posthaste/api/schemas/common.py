"""Shared response shapes (documentation: responses are rendered from core.serialize)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    statusCode: int = Field(examples=[422])
    name: str = Field(examples=["validation_error"])
    message: str


class Deleted(BaseModel):
    object: str
    id: str
    deleted: bool = True


# An address, bare or with a display name, as core.addresses.parse_address reads it (the name of
# RFC 5322's rule; not a JSON Schema format: clients see a string).
MAILBOX = "mailbox"

# Request fields as the API checks them (the models are documentation; bodies are parsed by hand).
Name = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=r"\S",
        description="1-200 characters, not only spaces (trimmed)",
    ),
]
OneLine = Annotated[str, Field(pattern="^[^\\x00-\\x1f\\x7f\\u2028\\u2029]*$")]
PersonName = Annotated[
    str,
    Field(
        max_length=200,
        pattern="^[^\\x00-\\x1f\\x7f\\u2028\\u2029]*$",
        description="At most 200 characters, no control characters",
    ),
]
Address = Annotated[
    str,
    Field(
        max_length=320,
        json_schema_extra={"format": "email"},
        description="One bare address, without a display name",
    ),
]
Mailbox = Annotated[
    str,
    Field(
        max_length=320,
        json_schema_extra={"format": MAILBOX},
        description="An address, bare or with a display name: Ann <ann@example.com>",
    ),
]
# A header line's text (subject, header and tag values): no control character but TAB, no line
# or paragraph separator (core.headers; JSON bodies carry no unpaired surrogate).
HEADER_TEXT = "^[^\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f\\u2028\\u2029]*$"
Subject = Annotated[
    str,
    Field(max_length=2000, pattern=HEADER_TEXT, description="One line of text, 2,000 at most"),
]
TemplateRef = Annotated[
    str,
    Field(
        pattern=r"\S",
        description="The id or alias of one of your templates; a live key sends its published "
        "version, so it must have been published (a test key sends the draft)",
    ),
]
Timestamp = Annotated[
    str, Field(json_schema_extra={"format": "date-time"}, description="RFC 3339, with a time zone")
]
Id = Annotated[str, Field(json_schema_extra={"format": "uuid"})]


def absent() -> Any:
    """``default_factory`` of an optional field that may not be null: left out, nothing changes
    (a plain ``None`` default would document null as allowed)."""
    return None
