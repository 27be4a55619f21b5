"""Received-email shapes (inbound mail), for the OpenAPI document."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ReceivedAttachmentEntry(BaseModel):
    id: str
    filename: str = Field(description="The part's own name, else attachment-<n>.<ext>")
    content_type: str
    size: int = Field(description="Bytes of the decoded file")
    content_id: str | None
    content_disposition: Literal["inline", "attachment"]


class Authentication(BaseModel):
    spf: str = Field(examples=["pass"], description="RFC 8601 result: pass, fail, none, ...")
    dkim: str = Field(examples=["pass"])
    dmarc: str = Field(examples=["pass"])


class ReceivedEmailSummary(BaseModel):
    object: str = "received_email"
    id: str
    from_: str = Field(alias="from")
    to: list[str]
    cc: list[str]
    bcc: list[str] = Field(description="Always empty: Bcc is not in the message received")
    reply_to: list[str]
    received_for: list[str] = Field(description="The envelope recipients it was accepted for")
    subject: str
    message_id: str
    created_at: str
    size: int = Field(description="Bytes of the raw message kept")
    attachments: list[ReceivedAttachmentEntry]
    authentication: Authentication


class RawLink(BaseModel):
    download_url: str = Field(description="Fetches the raw message without a key until expires_at")
    expires_at: str


class ReceivedEmailRecord(ReceivedEmailSummary):
    raw: RawLink
    html: str | None
    text: str | None
    headers: dict[str, str] = Field(description="Each header field's first (topmost) value")


class ReceivedEmailList(BaseModel):
    object: str = "list"
    data: list[ReceivedEmailSummary]
    next_cursor: str = Field(description="Empty at the end")
    has_more: bool
