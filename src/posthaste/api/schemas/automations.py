"""Automation, run and custom-event shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StepType = Literal[
    "trigger",
    "send_email",
    "delay",
    "wait_for_event",
    "condition",
    "contact_update",
    "contact_delete",
    "add_to_segment",
    "remove_from_segment",
]
ConnectionType = Literal[
    "default", "condition_met", "condition_not_met", "event_received", "timeout"
]
RunStatus = Literal["running", "completed", "failed", "cancelled"]


class AutomationStep(BaseModel):
    key: str = Field(description="1-64 letters, digits, '_' or '-', unique in the graph")
    type: StepType
    config: dict[str, Any] = Field(description="The step type's settings (docs/automations.md)")


class AutomationConnection(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from", description="The key of the step it leaves")
    to: str = Field(description="The key of the step it leads to")
    type: ConnectionType = "default"


class CreateAutomationRequest(BaseModel):
    name: str = Field(examples=["Welcome series"])
    status: Literal["enabled", "disabled"] = "disabled"
    steps: list[AutomationStep]
    connections: list[AutomationConnection] = []


class UpdateAutomationRequest(BaseModel):
    name: str | None = None
    status: Literal["enabled", "disabled"] | None = None
    steps: list[AutomationStep] | None = Field(None, description="A new graph: a new version")
    connections: list[AutomationConnection] | None = Field(None, description="With 'steps'")


class AutomationRecord(BaseModel):
    object: str = "automation"
    id: str
    name: str
    status: Literal["enabled", "disabled"]
    created_at: str
    updated_at: str
    steps: list[AutomationStep]
    connections: list[AutomationConnection]


class AutomationList(BaseModel):
    object: str = "list"
    data: list[AutomationRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")


class RunStepRecord(BaseModel):
    key: str
    type: StepType
    status: Literal["running", "completed", "failed"]
    started_at: str
    completed_at: str | None
    output: dict[str, Any] | None = Field(
        description="A send step's {email_id}, a condition's {met}"
    )
    error: str | None
    created_at: str


class RunSummary(BaseModel):
    object: str = "automation_run"
    id: str
    automation_id: str
    contact_id: str
    status: RunStatus
    started_at: str
    completed_at: str | None
    created_at: str


class RunRecord(RunSummary):
    steps: list[RunStepRecord] = Field(description="The steps the run reached, in order")


class RunList(BaseModel):
    object: str = "list"
    data: list[RunSummary]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")


class SendEventRequest(BaseModel):
    event: str = Field(examples=["order.paid"], description="A custom event's name")
    email: str | None = Field(None, description="The contact's address (made a contact if new)")
    contact_id: str | None = Field(None, description="Or the contact's id")
    payload: dict[str, Any] | None = Field(None, description="Rendered as {{event.<key>}}")


class SentEvent(BaseModel):
    object: str = "event"
    event: str
