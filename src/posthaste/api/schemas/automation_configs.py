"""Automation steps for the OpenAPI document: one schema per step type, each with the ``config``
that ``core.automation_configs`` checks, joined on ``type`` (a discriminated union).

What a schema cannot say stays a 422 and is stated in words (docs/automations.md): that keys are
unique, that there is one trigger, that connections name steps of the graph and leave each step
by the branches of its type, that every step is reachable and no path comes back; that a
duration is more than 0 and at most 365 days; that a template or a segment is one of yours.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import Id, Mailbox, Subject, TemplateRef, absent
from posthaste.api.schemas.contacts import ContactFields
from posthaste.api.schemas.emails import TagIn, TagMap, TemplateRefIn, any_case
from posthaste.core.automation_configs import (
    CONTACT_CREATED,
    CONTACT_FIELDS,
    CONTACT_UPDATE_FIELDS,
    MAX_RULES,
    OPERATORS,
    RESERVED_PREFIXES,
    VALUELESS,
)

_NOT_RESERVED = "|".join(any_case(prefix).replace(".", "\\.") for prefix in RESERVED_PREFIXES)
# A custom event's name (core.automation_configs.parse_event_name): not one of our families.
CUSTOM_EVENT = f"^(?!{_NOT_RESERVED})[A-Za-z0-9][A-Za-z0-9_.:-]{{0,99}}$"
# core.durations.parse_duration, surrounding spaces allowed; the bounds are in words.
DURATION = "^\\s*([0-9]+(\\.[0-9]+)?|\\.[0-9]+)\\s*(ms|s|m|h|d)?\\s*$"
_DURATION_WORDS = "A duration such as 90s, 2h or 3d (ms, s, m, h, d; bare: seconds): more than 0, "
_GIVEN = {"not": {"type": "null"}}
StepKey = Annotated[
    str,
    Field(
        pattern="^[A-Za-z0-9_-]{1,64}$",
        description="1-64 letters, digits, '_' or '-', unique in the graph",
    ),
]


def _event(pattern: str | dict[str, Any]) -> dict[str, Any]:
    """``event`` (or, when it is left out, Resend's ``event_name``) holding ``pattern``."""
    value = {"type": "string", "pattern": pattern} if isinstance(pattern, str) else pattern
    return {
        "anyOf": [
            {"required": ["event"], "properties": {"event": value}},
            {
                "required": ["event_name"],
                "not": {"required": ["event"]},
                "properties": {"event_name": value},
            },
        ]
    }


_TRIGGER_EVENT = {
    "anyOf": [{"const": CONTACT_CREATED}, {"type": "string", "pattern": CUSTOM_EVENT}]
}
_EVENT_WORDS = "Resend's name for event, read when event is left out"


class TriggerConfig(BaseModel):
    model_config = ConfigDict(json_schema_extra=_event(_TRIGGER_EVENT))

    event: str = Field(
        default_factory=absent,
        description="contact.created, or a custom event's name (not contact.*, email.*, "
        "domain.*, suppression.*, automation.*)",
    )
    event_name: Any = Field(default_factory=absent, description=_EVENT_WORDS)


# A template, or a subject with html or text (template_id is not read here).
_SEND_CONTENT: dict[str, Any] = {
    "anyOf": [
        {"required": ["template"], "properties": {"template": _GIVEN}},
        *(
            {"required": ["subject", body], "properties": {"subject": _GIVEN, body: _GIVEN}}
            for body in ("html", "text")
        ),
    ]
}


class SendEmailConfig(BaseModel):
    """The recipient is the run's contact; null is a field left out."""

    model_config = ConfigDict(json_schema_extra=_SEND_CONTENT)

    from_: Mailbox = Field(alias="from")
    template: TemplateRef | TemplateRefIn | None = Field(
        None, description="Alias or id of a template (or Resend's {id, variables})"
    )
    subject: Subject | None = None
    html: str | None = None
    text: str | None = None
    data: dict[str, Any] | None = Field(None, description="Template variables")
    reply_to: Mailbox | list[Mailbox] | None = None
    tags: TagMap | list[TagIn] | None = None


class DelayConfig(BaseModel):
    duration: str = Field(pattern=DURATION, description=_DURATION_WORDS + "at most 365 days")


class WaitForEventConfig(BaseModel):
    model_config = ConfigDict(json_schema_extra=_event(CUSTOM_EVENT))

    event: str = Field(default_factory=absent, description="A custom event's name")
    event_name: Any = Field(default_factory=absent, description=_EVENT_WORDS)
    timeout: str = Field(
        default_factory=absent,
        pattern=DURATION,
        description=_DURATION_WORDS + "at most 365 days (the default)",
    )
    filter_rule: None = Field(None, description="Not supported: follow the wait with a condition")


_FIELD = "|".join(CONTACT_FIELDS)


class ConditionRule(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"operator": {"enum": list(VALUELESS)}}},
                {
                    "required": ["value"],
                    "properties": {
                        "value": {"type": ["string", "number", "boolean"]},
                        "operator": {"not": {"enum": list(VALUELESS)}},
                    },
                },
            ]
        }
    )

    type: Literal["rule"] = Field(default_factory=absent, description="The default")
    field: str = Field(
        pattern=f"^(contact\\.({_FIELD})|contact\\.properties\\.[A-Za-z_][A-Za-z0-9_-]*"
        "|event(\\.[A-Za-z0-9_-]+)+)$",
        examples=["contact.properties.plan"],
    )
    operator: Literal[OPERATORS] = Field(  # type: ignore[valid-type]
        description="exists and is_empty take no value"
    )
    value: Any = Field(
        default_factory=absent,
        description="A string, a number or a boolean (but for exists, is_empty)",
    )


class _Group(BaseModel):
    type: Literal["and", "or"]


class ConditionGroup3(_Group):
    """A group nested two deep: it holds rules only."""

    rules: list[ConditionRule] = Field(min_length=1, max_length=MAX_RULES)


class ConditionGroup2(_Group):
    rules: list[ConditionRule | ConditionGroup3] = Field(min_length=1, max_length=MAX_RULES)


class ConditionGroup(_Group):
    """Rules joined by and/or, nested at most 3 deep."""

    rules: list[ConditionRule | ConditionGroup2] = Field(min_length=1, max_length=MAX_RULES)


_SOME_CONTACT_FIELD: dict[str, Any] = {
    "anyOf": [{"required": [name]} for name in CONTACT_UPDATE_FIELDS],
    "not": {"required": ["email"]},
}


class ContactUpdateConfig(ContactFields):
    """At least one field; the address cannot be changed."""

    model_config = ConfigDict(json_schema_extra=_SOME_CONTACT_FIELD)


class SegmentConfig(BaseModel):
    segment_id: Id = Field(description="One of your segments")


class TriggerStep(BaseModel):
    """Exactly one per graph: a run starts there."""

    key: StepKey
    type: Literal["trigger"]
    config: TriggerConfig


class SendEmailStep(BaseModel):
    key: StepKey
    type: Literal["send_email"]
    config: SendEmailConfig


class DelayStep(BaseModel):
    key: StepKey
    type: Literal["delay"]
    config: DelayConfig


class WaitForEventStep(BaseModel):
    """Leads on with event_received or timeout."""

    key: StepKey
    type: Literal["wait_for_event"]
    config: WaitForEventConfig


class ConditionStep(BaseModel):
    """Leads on with condition_met or condition_not_met."""

    key: StepKey
    type: Literal["condition"]
    config: ConditionRule | ConditionGroup


class ContactUpdateStep(BaseModel):
    key: StepKey
    type: Literal["contact_update"]
    config: ContactUpdateConfig


class ContactDeleteStep(BaseModel):
    key: StepKey
    type: Literal["contact_delete"]
    config: dict[str, Any] = Field(default_factory=dict, description="Nothing to set")


class SegmentStep(BaseModel):
    key: StepKey
    type: Literal["add_to_segment", "remove_from_segment"]
    config: SegmentConfig


AutomationStep = Annotated[
    TriggerStep
    | SendEmailStep
    | DelayStep
    | WaitForEventStep
    | ConditionStep
    | ContactUpdateStep
    | ContactDeleteStep
    | SegmentStep,
    Field(discriminator="type"),
]
