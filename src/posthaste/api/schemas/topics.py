"""Topic shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CreateTopicRequest(BaseModel):
    name: str = Field(examples=["Product updates"])
    description: str | None = None
    default_subscription: str = Field(description="opt_in or opt_out (fixed once created)")


class UpdateTopicRequest(BaseModel):
    name: str | None = None
    description: str | None = None


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
    id: str = Field(description="A topic id")
    subscription: str = Field(description="opt_in or opt_out")


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
