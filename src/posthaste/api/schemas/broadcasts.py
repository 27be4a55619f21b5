"""Broadcast shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import (
    Id,
    Mailbox,
    OneLine,
    Subject,
    TemplateRef,
    Timestamp,
    absent,
)


class BroadcastRequest(BaseModel):
    """``POST /broadcasts`` (``segment_id`` and ``from`` required) and ``PATCH`` (any field)."""

    model_config = ConfigDict(populate_by_name=True)

    name: OneLine | None = Field(None, max_length=200)
    segment_id: Id | None = Field(None, description="Resend's audience_id is accepted too")
    from_: str | None = Field(None, alias="from", examples=["News <news@example.com>"])
    subject: Subject | None = None
    html: str | None = None
    text: str | None = None
    template: TemplateRef | None = Field(None, description="Alias or id; or template_id")
    data: dict[str, Any] | None = Field(None, description="Template variables")
    reply_to: Mailbox | list[Mailbox] | None = None
    stream_id: str | None = Field(
        None, min_length=1, description="One of your streams; default: broadcast"
    )
    topic_id: Id | None = Field(None, description="Mail only the members subscribed to it")
    preview_text: OneLine | None = Field(None, max_length=500)
    send: bool = Field(
        default_factory=absent, description="Create only: send at once (or schedule)"
    )
    scheduled_at: Timestamp | None = Field(
        None, description="RFC 3339 with a time zone, with send: true; up to 30 days ahead"
    )


class CreateBroadcastRequest(BroadcastRequest):
    """``POST /broadcasts``: a segment and a sender are required."""

    model_config = ConfigDict(
        populate_by_name=True,
        # scheduled_at only with send: true (else it would be lost).
        json_schema_extra={
            "anyOf": [
                {"not": {"required": ["scheduled_at"]}},
                {"properties": {"scheduled_at": {"type": "null"}}},
                {"required": ["send"], "properties": {"send": {"const": True}}},
            ]
        },
    )

    segment_id: Id = Field(description="One of the team's segments (Resend's audience_id too)")
    from_: Mailbox = Field(alias="from", examples=["News <news@example.com>"])


class SendBroadcastRequest(BaseModel):
    scheduled_at: Timestamp | None = Field(
        None, description="RFC 3339 with a time zone; absent or past: now"
    )


class BroadcastRecord(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    object: str = "broadcast"
    id: str
    name: str | None
    segment_id: str
    audience_id: str = Field(description="The same as segment_id (Resend's older name)")
    topic_id: str | None
    from_: str = Field(alias="from")
    reply_to: list[str]
    subject: str | None
    html: str | None
    text: str | None
    template: str | None
    data: dict[str, Any]
    stream_id: str
    preview_text: str | None
    status: str = Field(description="draft, scheduled, sending, sent, cancelled or failed")
    error: str | None = Field(description="Why it failed, or why it is paused (daily quota)")
    created_at: str
    updated_at: str
    scheduled_at: str | None
    sent_at: str | None = Field(description="When expansion finished")
    resumes_at: str | None = Field(description="Paused by the daily quota until then")
    recipients: int = Field(description="Members expanded so far")
    sent: int = Field(description="Emails accepted for members")
    skipped_unsubscribed: int
    skipped_suppressed: int
    skipped_topic: int
    failed: int = Field(description="Members whose email could not be made (rendering)")


class BroadcastList(BaseModel):
    object: str = "list"
    data: list[BroadcastRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")
