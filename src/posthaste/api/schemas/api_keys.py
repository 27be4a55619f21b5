"""API key shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from posthaste.api.schemas.common import Name


class CreateApiKeyRequest(BaseModel):
    name: Name
    permission: Literal["full_access", "sending_access"] = "full_access"
    domain_id: str | None = Field(None, description="The id of one of the team's domains")
    mode: Literal["live", "test"] | None = Field(
        None,
        description="live or test; default: the calling key's mode (a test key makes test keys)",
    )


class UpdateApiKeyRequest(BaseModel):
    name: Name


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
