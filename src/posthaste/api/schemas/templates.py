"""Template shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field

Scalar = str | float | bool | None


class TemplateVariableIn(BaseModel):
    key: str = Field(description="Placeholder path, e.g. first_name or order.total")
    fallback_value: Scalar = Field(None, description="Used when a send gives no value; null: none")
    type: str | None = Field(None, description="Resend's 'string' or 'number' (informative)")


class CreateTemplateRequest(BaseModel):
    name: str = Field(examples=["Welcome"])
    alias: str | None = Field(
        None, description="lowercase letters, digits, '-', '_'; at most 64; unique per team"
    )
    subject: str | None = Field(None, examples=["Welcome, {{ first_name }}"])
    html: str | None = Field(None, examples=["<p>Hi {{ first_name }}</p>"])
    text: str | None = None
    variables: list[TemplateVariableIn] | None = None


class UpdateTemplateRequest(BaseModel):
    name: str | None = None
    alias: str | None = None
    subject: str | None = None
    html: str | None = None
    text: str | None = None
    variables: list[TemplateVariableIn] | None = None


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
