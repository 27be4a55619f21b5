"""OpenAPI shapes of delivery attempts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class AttemptReply(BaseModel):
    recipient: str
    code: int = Field(description="the SMTP reply code; a 4xx stands for timeouts and refusals")
    text: str
    outcome: str = Field(examples=["delivered", "accepted", "deferred", "bounced"])


class AttemptRecord(BaseModel):
    object: str = "delivery_attempt"
    id: str
    attempt: int = Field(description="1 for the first try, 2 for the first retry, ...")
    attempted_at: str
    transport: str = Field(examples=["smtp", "mx", "capture", "simulator"])
    host: str | None = Field(description="the server spoken to (host:port for a smarthost)")
    recipients: list[str]
    replies: list[AttemptReply]
    transcript: list[dict[str, Any]] = Field(
        description="{elapsed_ms, command|reply|note}; never the body nor AUTH credentials"
    )
    duration_ms: int


class AttemptList(BaseModel):
    object: str = "list"
    data: list[AttemptRecord]
