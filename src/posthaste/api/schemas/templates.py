"""Template shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import Name, Subject, absent
from posthaste.core.templates import PATH_PATTERN

Scalar = str | float | bool | None
Alias = Annotated[
    str,
    Field(
        pattern="^[a-z0-9_-]{1,64}$",
        # A UUID is a template's id: an alias may not look like one.
        json_schema_extra={"not": {"format": "uuid"}},
        description="1-64 lowercase letters, digits, '-' and '_', unique per team; not a UUID",
    ),
]


class TemplateVariableIn(BaseModel):
    key: str = Field(
        pattern=f"^{PATH_PATTERN}$",
        max_length=200,
        description="Placeholder path, e.g. first_name or order.total",
    )
    fallback_value: Scalar = Field(None, description="Used when a send gives no value; null: none")
    type: Literal["string", "number"] | None = Field(None, description="Resend's (informative)")


class CreateTemplateRequest(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["html"], "properties": {"html": {"type": "string"}}},
                {"required": ["text"], "properties": {"text": {"type": "string"}}},
            ]
        }
    )

    name: Name = Field(examples=["Welcome"])
    alias: Alias | None = None
    subject: Subject | None = Field(None, examples=["Welcome, {{ first_name }}"])
    html: str | None = Field(None, examples=["<p>Hi {{ first_name }}</p>"])
    text: str | None = None
    variables: list[TemplateVariableIn] | None = Field(
        None, max_length=100, description="At most 100, each key once"
    )


class UpdateTemplateRequest(BaseModel):
    name: Name = Field(default_factory=absent)
    alias: Alias | None = None
    subject: Subject | None = None
    html: str | None = None
    text: str | None = None
    variables: list[TemplateVariableIn] | None = Field(
        None, max_length=100, description="At most 100, each key once"
    )


class TemplateRecord(BaseModel):
    object: str = "template"
    id: str
    name: str
    alias: str | None
    subject: str | None = Field(description="Latest (draft) content")
    html: str | None
    text: str | None
    variables: list[TemplateVariableIn]
    status: str = Field(description="draft or published")
    published_at: str | None
    has_unpublished_changes: bool = Field(description="Edits since the last publish")
    created_at: str
    updated_at: str


class TemplateList(BaseModel):
    object: str = "list"
    data: list[TemplateRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")


class TemplatePreview(BaseModel):
    object: str = "template_preview"
    id: str
    subject: str | None
    html: str | None
    text: str | None
    missing_variables: list[str] = Field(description="Placeholders left visible: no fallback")
