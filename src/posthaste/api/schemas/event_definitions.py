"""Event definition shapes (Resend's ``/events``), for the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

EVENT_NAME = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"
FieldType = Literal["string", "number", "boolean", "date"]
# At most 100 fields, each named by 1-100 characters without control characters.
Schema = Annotated[
    dict[str, FieldType],
    Field(
        json_schema_extra={
            "propertyNames": {"pattern": "^[^\\x00-\\x1f\\x7f]{1,100}$"},
            "maxProperties": 100,
        }
    ),
]


class CreateEventDefinitionRequest(BaseModel):
    name: str = Field(
        examples=["order.paid"],
        pattern=EVENT_NAME,
        description="The custom event's name: 1-100 letters, digits, '_', '.', ':' or '-' "
        "(a letter or digit first), not one of Posthaste's own event types",
    )
    schema_: Schema | None = Field(
        None,
        alias="schema",
        description="Flat field → type map that POST /events/send checks payloads against",
    )


class UpdateEventDefinitionRequest(BaseModel):
    schema_: Schema | None = Field(
        alias="schema", description="The new schema, or null to clear it"
    )


class EventDefinitionRecord(BaseModel):
    object: str = "event"
    id: str
    name: str
    schema_: dict[str, FieldType] | None = Field(alias="schema")
    created_at: str
    updated_at: str


class EventDefinitionList(BaseModel):
    object: str = "list"
    data: list[EventDefinitionRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")
