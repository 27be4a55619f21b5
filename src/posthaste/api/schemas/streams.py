"""Message stream shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CreateStreamRequest(BaseModel):
    id: str | None = Field(None, description="Slug; derived from the name when omitted")
    name: str
    type: str = Field(description="transactional or broadcast")


class UpdateStreamRequest(BaseModel):
    name: str


class StreamRecord(BaseModel):
    object: str = "stream"
    id: str
    name: str
    type: str
    created_at: str


class StreamList(BaseModel):
    object: str = "list"
    data: list[StreamRecord]
