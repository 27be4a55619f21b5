"""API key shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CreateApiKeyRequest(BaseModel):
    name: str
    permission: str = Field("full_access", description="full_access or sending_access")
    domain_id: str | None = None
    mode: str | None = Field(None, description="live or test; default: the calling key's mode")


class UpdateApiKeyRequest(BaseModel):
    name: str = Field(description="The key's new name, 1-200 characters")


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
    has_more: bool = Field(description="More keys lie past this page (false for the full set)")
