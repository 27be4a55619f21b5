"""Segment shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field

from posthaste.api.schemas.common import Name


class SegmentRequest(BaseModel):
    name: Name = Field(examples=["Newsletter"])


class SegmentRecord(BaseModel):
    object: str = "segment"
    id: str
    name: str
    created_at: str


class SegmentList(BaseModel):
    object: str = "list"
    data: list[SegmentRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")
