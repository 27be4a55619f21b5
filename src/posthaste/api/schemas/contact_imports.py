"""Contact import shapes, for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LineErrorRecord(BaseModel):
    line: int = Field(description="The CSV line (the header is line 1) where the record starts")
    message: str


class ImportCounts(BaseModel):
    total: int = Field(description="Contact lines in the CSV (blank lines are not counted)")
    created: int
    updated: int
    skipped: int = Field(description="Lines on existing contacts that changed nothing")
    failed: int = Field(description="Lines refused (the first 100 are in errors)")


class ContactImportRecord(BaseModel):
    object: str = "contact_import"
    id: str
    status: str = Field(description="queued, running, completed or failed")
    on_conflict: str = Field(description="upsert or skip")
    segment_ids: list[str]
    total: int
    created: int
    updated: int
    skipped: int
    failed: int
    counts: ImportCounts = Field(description="The same counts, where Resend's SDKs read them")
    errors: list[LineErrorRecord] = Field(description="The first 100 refused lines")
    created_at: str
    completed_at: str | None


class ContactImportList(BaseModel):
    object: str = "list"
    data: list[ContactImportRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")
