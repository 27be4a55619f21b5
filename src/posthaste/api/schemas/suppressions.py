"""Suppression shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import Address, absent


class CreateSuppressionRequest(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [{"required": ["email"]}, {"required": ["emails"]}],
            "not": {"required": ["email", "emails"]},
        }
    )

    """One address (``email``), or several (``emails``; a JSON array of addresses or of
    ``{email}`` objects is taken too)."""

    email: Address = Field(default_factory=absent, description="One address (answers its entry)")
    emails: list[Address] = Field(
        default_factory=absent,
        min_length=1,
        max_length=1000,
        description="1 to 1,000 addresses, all or none (answers a list)",
    )


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
    has_more: bool = Field(description="Resend's form of next_cursor: more entries lie past")


class SuppressionBatch(BaseModel):
    emails: list[Address] = Field(min_length=1, max_length=1000, description="1 to 1,000 addresses")


class SuppressionBatchRemoval(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["emails"]}, {"required": ["ids"]}]}
    )

    emails: list[Address] = Field(
        default_factory=absent, min_length=1, max_length=1000, description="Addresses (or ids)"
    )
    ids: list[str] = Field(
        default_factory=absent,
        min_length=1,
        max_length=1000,
        description="Suppression ids (or emails)",
    )


class SuppressionsAdded(BaseModel):
    object: str = "list"
    data: list[SuppressionRecord]


class RemovedSuppression(BaseModel):
    object: str = "suppression"
    id: str
    deleted: bool


class SuppressionsRemoved(BaseModel):
    object: str = "list"
    data: list[RemovedSuppression]
