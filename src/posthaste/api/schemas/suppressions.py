"""Suppression shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CreateSuppressionRequest(BaseModel):
    email: str


class SuppressionRecord(BaseModel):
    object: str = "suppression"
    id: str
    email: str
    origin: str
    source_email_id: str | None
    created_at: str


class SuppressionList(BaseModel):
    object: str = "list"
    data: list[SuppressionRecord]
    next_cursor: str
    has_more: bool = Field(description="Resend's form of next_cursor: more entries lie past")
