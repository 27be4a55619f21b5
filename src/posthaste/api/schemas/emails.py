"""Email request and response shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from posthaste.api.schemas.common import Mailbox, Timestamp

Recipients = Annotated[list[Mailbox], Field(min_length=1, max_length=50)]


class AttachmentIn(BaseModel):
    filename: str
    content_type: str | None = Field(
        None,
        examples=["application/pdf"],
        description="Default: the type of the filename's extension, else application/octet-stream",
    )
    content: str | list[int] = Field(
        description="Base64 of the file, or an array of byte values (integers 0-255); "
        "anything else is a validation_error"
    )
    content_id: str | None = Field(None, description="Makes the attachment inline (cid: URL)")
    inline_content_id: str | None = Field(None, description="Resend's other name for content_id")


class TagIn(BaseModel):
    name: str
    value: str


class TemplateRefIn(BaseModel):
    id: str
    variables: dict[str, Any] | None = None


class SendEmailRequest(BaseModel):
    from_: Mailbox = Field(alias="from", examples=["Acme <hello@acme.test>"])
    to: Mailbox | Recipients = Field(description="At most 50 recipients in to, cc and bcc together")
    cc: Mailbox | Recipients | None = None
    bcc: Mailbox | Recipients | None = None
    reply_to: Mailbox | Recipients | None = None
    subject: str | None = None
    html: str | None = None
    text: str | None = None
    headers: dict[str, str] | None = None
    tags: dict[str, str] | list[TagIn] | None = None
    data: dict[str, Any] | None = None
    scheduled_at: Timestamp | None = Field(
        None, description="RFC 3339 with a time zone; up to 30 days ahead"
    )
    template: str | TemplateRefIn | None = Field(None, description="Alias or id of a template")
    template_id: str | None = None
    stream_id: str | None = Field(None, description="Default: transactional")
    attachments: list[AttachmentIn] | None = None


class RescheduleRequest(BaseModel):
    scheduled_at: Timestamp | None


class EmailRecord(BaseModel):
    object: str = "email"
    id: str
    from_: str = Field(alias="from")
    to: list[str]
    cc: list[str]
    bcc: list[str]
    reply_to: list[str]
    subject: str
    html: str | None
    text: str | None
    headers: dict[str, str]
    tags: dict[str, str]
    status: str = Field(examples=["queued"])
    last_event: str
    created_at: str
    scheduled_at: str | None
    sent_at: str | None
    template_id: str | None
    stream_id: str
    broadcast_id: str | None
    message_id: str
    provider_message_id: str | None
    region: str
    origin: str = Field(
        description="The entry point it came through: api, batch, relay, broadcast, automation",
        examples=["api"],
    )


class EmailList(BaseModel):
    object: str = "list"
    data: list[EmailRecord]
    next_cursor: str = Field(description="Empty at the end")
    has_more: bool = Field(description="Resend's: more emails lie past this page, its way")


class BatchError(BaseModel):
    name: str
    message: str


class BatchEntry(BaseModel):
    index: int
    id: str | None = None
    error: BatchError | None = None


class BatchFailure(BaseModel):
    index: int
    message: str


class BatchResult(BaseModel):
    data: list[BatchEntry]
    errors: list[BatchFailure] | None = Field(
        default=None,
        description="Only with the header x-batch-validation: permissive: the failed items",
    )


class EventRecord(BaseModel):
    object: str = "event"
    id: str
    type: str = Field(examples=["email.delivered"])
    created_at: str
    data: dict[str, Any]


class EventList(BaseModel):
    object: str = "list"
    data: list[EventRecord]


class AttachmentRecord(BaseModel):
    object: str = "attachment"
    id: str
    filename: str
    content_type: str
    size: int
    content_id: str | None
    content_disposition: Literal["inline", "attachment"]
    download_url: str = Field(description="Fetches the file without a key until expires_at")
    expires_at: str


class AttachmentList(BaseModel):
    object: str = "list"
    data: list[AttachmentRecord]
    has_more: bool
