"""Automation, run and custom-event shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.automation_configs import AutomationStep
from posthaste.api.schemas.common import Address, Id, Name, absent
from posthaste.api.schemas.event_definitions import EVENT_NAME
from posthaste.core.automations import MAX_CONNECTIONS, MAX_STEPS

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


class AutomationConnection(BaseModel):
    """Out of a condition lead condition_met and condition_not_met, out of a wait_for_event
    event_received and timeout, out of any other step default: each at most once per step;
    nothing leads into the trigger."""

    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from", description="The key of the step it leaves")
    to: str = Field(description="The key of the step it leads to")
    type: ConnectionType | None = Field(None, description="default when left out or null")


Steps = Annotated[
    list[AutomationStep],
    Field(
        min_length=1,
        max_length=MAX_STEPS,
        description="Exactly one trigger; every step reachable from it, and no cycle",
    ),
]
Connections = Annotated[list[AutomationConnection], Field(max_length=MAX_CONNECTIONS)]


class CreateAutomationRequest(BaseModel):
    name: Name = Field(examples=["Welcome series"])
    status: Literal["enabled", "disabled"] | None = Field(None, description="Default: disabled")
    steps: Steps
    connections: Connections | None = None


class UpdateAutomationRequest(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [{"required": ["steps"]}, {"not": {"required": ["connections"]}}]
        }
    )

    name: Name = Field(default_factory=absent)
    status: Literal["enabled", "disabled"] = Field(default_factory=absent)
    steps: Steps = Field(default_factory=absent, description="A new graph: a new version")
    connections: Connections | None = Field(None, description="Only with 'steps'")


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
    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["email"]}, {"required": ["contact_id"]}]}
    )

    event: str = Field(
        examples=["order.paid"], pattern=EVENT_NAME, description="A custom event's name"
    )
    email: Address = Field(
        default_factory=absent,
        description="The contact's address (made a contact if new); exactly one of email and "
        "contact_id",
    )
    contact_id: Id = Field(default_factory=absent, description="Or the contact's id")
    payload: dict[str, Any] | None = Field(None, description="Rendered as {{event.<key>}}")


class SentEvent(BaseModel):
    object: str = "event"
    event: str
