"""Contact shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field

from posthaste.api.schemas.topics import ContactTopicChoice

PropertyValue = str | int | float


class SegmentRef(BaseModel):
    id: str


class CreateContactRequest(BaseModel):
    email: str = Field(examples=["ann@example.com"])
    first_name: str | None = None
    last_name: str | None = None
    unsubscribed: bool = False
    properties: dict[str, PropertyValue] | None = Field(
        None, description="Flat: at most 50 keys, strings (up to 2,000 characters) or numbers"
    )
    segments: list[str | SegmentRef] | None = Field(None, description="Segment ids to join")
    topics: list[ContactTopicChoice] | None = Field(None, description="The contact's choices")


class UpdateContactRequest(BaseModel):
    email: str | None = Field(None, description="A new address (unique in the team)")
    first_name: str | None = None
    last_name: str | None = None
    unsubscribed: bool | None = None
    properties: dict[str, PropertyValue | None] | None = Field(
        None, description="Merged key by key; a null value removes the key, null removes all"
    )


class ContactRecord(BaseModel):
    object: str = "contact"
    id: str
    email: str
    first_name: str | None
    last_name: str | None
    unsubscribed: bool
    properties: dict[str, PropertyValue]
    created_at: str
    updated_at: str


class ContactList(BaseModel):
    object: str = "list"
    data: list[ContactRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")
