"""Message stream shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from posthaste.api.schemas.common import Name


class CreateStreamRequest(BaseModel):
    id: str | None = Field(
        None,
        pattern="^[a-z0-9][a-z0-9_-]{0,63}$",
        description="Slug; derived from the name when omitted or null (then the name must give "
        "one: a letter or digit first)",
    )
    name: Name
    type: Literal["transactional", "broadcast"]


class UpdateStreamRequest(BaseModel):
    name: Name


class StreamRecord(BaseModel):
    object: str = "stream"
    id: str
    name: str
    type: str
    created_at: str


class StreamList(BaseModel):
    object: str = "list"
    data: list[StreamRecord]
