"""Shared response shapes (documentation: responses are rendered from core.serialize)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    statusCode: int = Field(examples=[422])
    name: str = Field(examples=["validation_error"])
    message: str


class Deleted(BaseModel):
    object: str
    id: str
    deleted: bool = True
