"""Webhook and event stream shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import absent
from posthaste.core.netpolicy import MAX_ENDPOINT_LENGTH
from posthaste.core.webhooks import EVENT_TYPES

EventType = Literal[EVENT_TYPES]  # type: ignore[valid-type]
Endpoint = Annotated[
    str,
    Field(
        max_length=MAX_ENDPOINT_LENGTH,
        pattern=r"^\s*[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+([/?#]\S*)?\s*$",
        json_schema_extra={"format": "uri"},
        description="Absolute http or https URL; its host must resolve to public addresses",
    ),
]

# enabled and Resend's status, given together, must say the same thing.
STATUS_DISAGREES: dict[str, Any] = {
    "anyOf": [
        {
            "required": ["enabled", "status"],
            "properties": {"enabled": {"const": enabled}, "status": {"const": status}},
        }
        for enabled, status in ((True, "disabled"), (False, "enabled"))
    ]
}


class CreateWebhookRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"not": STATUS_DISAGREES})

    endpoint: Endpoint
    events: list[EventType] = Field(min_length=1, description="Event types, at least one")
    enabled: bool = True
    status: Literal["enabled", "disabled"] = Field(
        default_factory=absent,
        description="Resend's form of enabled; if both are given they must agree",
    )


class UpdateWebhookRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"not": STATUS_DISAGREES})

    endpoint: Endpoint = Field(default_factory=absent)
    events: list[EventType] = Field(default_factory=absent, min_length=1)
    enabled: bool = Field(default_factory=absent)
    status: Literal["enabled", "disabled"] = Field(
        default_factory=absent,
        description="Resend's form of enabled; if both are given they must agree",
    )


class WebhookRecord(BaseModel):
    object: str = "webhook"
    id: str
    endpoint: str
    events: list[str]
    enabled: bool
    status: Literal["enabled", "disabled"] = Field(description="Resend's form of enabled")
    created_at: str
    updated_at: str


class WebhookWithSecret(WebhookRecord):
    secret: str = Field(
        description="whsec_ + 48 hex characters; shown only on create and rotate",
        examples=["whsec_" + "0" * 48],
    )
    signing_secret: str = Field(description="Resend's name for secret: the same value")


class WebhookList(BaseModel):
    object: str = "list"
    data: list[WebhookRecord]
    has_more: bool = Field(description="More webhooks lie past this page (false for the full set)")


class WebhookEnvelope(BaseModel):
    type: str
    created_at: str
    data: dict[str, Any]


class WebhookEventRecord(BaseModel):
    object: str = "webhook_event"
    id: str = Field(description="The event id, also sent as webhook-id")
    type: str
    payload: WebhookEnvelope = Field(description="The whole envelope sent")
    created_at: str
    status: str = Field(description="pending, delivered or failed")
    attempts: int
    next_attempt_at: str | None


class WebhookEventList(BaseModel):
    object: str = "list"
    data: list[WebhookEventRecord]
    has_more: bool = Field(description="More events lie past this page (false for the full set)")


class WebhookAttemptRecord(BaseModel):
    object: str = "webhook_attempt"
    id: str
    attempted_at: str
    status_code: int | None
    success: bool
    error: str | None
    duration_ms: int
    response_body: str | None = Field(description="The first 1 KiB of the answer")
    sent_at: str = Field(description="Resend's name for attempted_at")
    http_status_code: int | None = Field(description="Resend's name for status_code")
    response: str | None = Field(description="Resend's name for response_body")


class WebhookAttemptList(BaseModel):
    object: str = "list"
    data: list[WebhookAttemptRecord]
    has_more: bool = Field(description="More attempts lie past this page (false for all of them)")
