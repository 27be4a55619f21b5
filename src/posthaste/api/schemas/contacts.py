"""Contact shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from posthaste.api.schemas.common import Address, Id, PersonName, absent
from posthaste.api.schemas.topics import ContactTopicChoice

PropertyValue = Annotated[str, Field(max_length=2000)] | int | float
# What core.contacts takes as a property key; at most 50 keys.
PROPERTY_KEYS: dict[str, Any] = {
    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_-]{0,63}$"},
    "maxProperties": 50,
}


class SegmentRef(BaseModel):
    id: Id


class CreateContactRequest(BaseModel):
    email: Address = Field(examples=["ann@example.com"])
    first_name: PersonName | None = None
    last_name: PersonName | None = None
    unsubscribed: bool = False
    properties: dict[str, PropertyValue] | None = Field(
        None,
        json_schema_extra=PROPERTY_KEYS,
        description="Flat: at most 50 keys, strings (up to 2,000 characters) or numbers",
    )
    segments: list[Id | SegmentRef] | None = Field(
        None, max_length=100, description="Segment ids to join (of the team's segments)"
    )
    topics: list[ContactTopicChoice] | None = Field(None, description="The contact's choices")


class AudienceContactRequest(CreateContactRequest):
    """``POST /audiences/{segment_id}/contacts``: the contact joins the path's segment."""

    segments: Any = Field(None, description="Ignored here: the path names the segment")


class ContactFields(BaseModel):
    """A contact's changeable fields, each optional: a contact's update and an automation's
    ``update_contact`` step take the same ones."""

    first_name: PersonName | None = None
    last_name: PersonName | None = None
    unsubscribed: bool = Field(default_factory=absent)
    properties: dict[str, PropertyValue | None] | None = Field(
        None,
        json_schema_extra=PROPERTY_KEYS,
        description="Merged key by key; a null value removes the key, null removes all",
    )


class UpdateContactRequest(ContactFields):
    email: Address = Field(default_factory=absent, description="A new address (unique in the team)")


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
