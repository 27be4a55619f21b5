"""API key, stream and suppression shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CreateApiKeyRequest(BaseModel):
    name: str
    permission: str = Field("full_access", description="full_access or sending_access")
    domain_id: str | None = None
    mode: str | None = Field(None, description="live or test; default: the calling key's mode")


class ApiKeyRecord(BaseModel):
    object: str = "api_key"
    id: str
    name: str
    mode: str
    permission: str
    domain_id: str | None
    token_hint: str
    created_at: str


class CreatedApiKey(ApiKeyRecord):
    token: str = Field(description="Shown only here, never again")


class ApiKeyList(BaseModel):
    object: str = "list"
    data: list[ApiKeyRecord]


class CreateStreamRequest(BaseModel):
    id: str | None = Field(None, description="Slug; derived from the name when omitted")
    name: str
    type: str = Field(description="transactional or broadcast")


class UpdateStreamRequest(BaseModel):
    name: str


class StreamRecord(BaseModel):
    object: str = "stream"
    id: str
    name: str
    type: str
    created_at: str


class StreamList(BaseModel):
    object: str = "list"
    data: list[StreamRecord]


class CreateSuppressionRequest(BaseModel):
    email: str


class SuppressionRecord(BaseModel):
    object: str = "suppression"
    id: str
    email: str
    origin: str
    source_email_id: str | None
    created_at: str


class SuppressionList(BaseModel):
    object: str = "list"
    data: list[SuppressionRecord]
    next_cursor: str
