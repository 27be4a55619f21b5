"""Topic shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from posthaste.api.schemas.common import Id, Name, absent


class CreateTopicRequest(BaseModel):
    name: Name = Field(examples=["Product updates"])
    description: str | None = Field(None, max_length=2000)
    default_subscription: Literal["opt_in", "opt_out"] = Field(description="Fixed once created")


class UpdateTopicRequest(BaseModel):
    name: Name = Field(default_factory=absent)
    description: str | None = Field(None, max_length=2000)


class TopicRecord(BaseModel):
    object: str = "topic"
    id: str
    name: str
    description: str | None
    default_subscription: str
    created_at: str
    updated_at: str


class TopicList(BaseModel):
    object: str = "list"
    data: list[TopicRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")


class ContactTopicChoice(BaseModel):
    id: Id = Field(description="A topic id")
    subscription: Literal["opt_in", "opt_out"]


class ContactTopicsRequest(BaseModel):
    topics: list[ContactTopicChoice] = Field(
        description="The choices; Resend's bare array of them is accepted too"
    )


class ContactTopicRecord(BaseModel):
    id: str
    name: str
    description: str | None
    subscription: str = Field(description="Effective: the contact's choice, else the default")


class ContactTopicList(BaseModel):
    object: str = "list"
    id: str = Field(description="The contact's id")
    data: list[ContactTopicRecord]
    has_more: bool
