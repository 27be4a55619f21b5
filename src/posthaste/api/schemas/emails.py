"""Email request and response shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import HEADER_TEXT, Mailbox, Subject, TemplateRef, Timestamp
from posthaste.core.headers import RESERVED_HEADER_PREFIX, RESERVED_HEADERS

Recipients = Annotated[list[Mailbox], Field(min_length=1, max_length=50)]
Copies = Annotated[list[Mailbox], Field(max_length=50)]

_GIVEN = {"not": {"type": "null"}}
MEDIA_TYPE = "[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
ContentId = Annotated[str, Field(pattern="^[\\x21-\\x3b\\x3d\\x3f-\\x7e]{1,250}$")]
Base64 = Annotated[
    str,
    Field(
        pattern="^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
        description="Base64 (whitespace in it is ignored)",
    ),
]
TAG_NAME = "^[A-Za-z0-9_-]{1,256}$"
TagMap = Annotated[
    dict[str, Annotated[str, Field(max_length=256, pattern=HEADER_TEXT)]],
    Field(json_schema_extra={"propertyNames": {"pattern": TAG_NAME}, "maxProperties": 50}),
]


def any_case(name: str) -> str:
    """``name`` (letters and '-') in a pattern that ignores case."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name)


# RFC 5322 field names (printable ASCII but ':'), not one the service writes itself.
_RESERVED = "|".join(any_case(name) for name in sorted(RESERVED_HEADERS))
CUSTOM_HEADERS: dict[str, Any] = {
    "propertyNames": {
        "pattern": f"^(?!({_RESERVED})$)(?!{any_case(RESERVED_HEADER_PREFIX)})[!-9;-~]+$"
    },
    "additionalProperties": {"type": "string", "pattern": HEADER_TEXT, "maxLength": 996},
    "maxProperties": 50,
}
# A template (template or template_id, not both), or a subject with html or text.
SEND_CONTENT: dict[str, Any] = {
    "anyOf": [
        {"required": ["template"], "properties": {"template": _GIVEN}},
        {"required": ["template_id"], "properties": {"template_id": _GIVEN}},
        *(
            {"required": ["subject", body], "properties": {"subject": _GIVEN, body: _GIVEN}}
            for body in ("html", "text")
        ),
    ],
    "not": {
        "required": ["template", "template_id"],
        "properties": {"template": _GIVEN, "template_id": _GIVEN},
    },
}


class AttachmentIn(BaseModel):
    filename: str = Field(
        min_length=1, max_length=255, pattern="^[^\\r\\n\\x00]*[^\\s\\x00][^\\r\\n\\x00]*$"
    )
    content_type: str | None = Field(
        None,
        pattern=f"^{MEDIA_TYPE}/{MEDIA_TYPE}$",
        examples=["application/pdf"],
        description="Default: the type of the filename's extension, else application/octet-stream",
    )
    content: Base64 | list[Annotated[int, Field(ge=0, le=255)]] = Field(
        description="Base64 of the file, or an array of byte values (integers 0-255); "
        "anything else is a validation_error"
    )
    content_id: ContentId | None = Field(None, description="Makes the attachment inline (cid: URL)")
    inline_content_id: ContentId | None = Field(
        None, description="Resend's other name for content_id (the same value if both)"
    )


class TagIn(BaseModel):
    name: str = Field(pattern=TAG_NAME)
    value: str = Field(max_length=256, pattern=HEADER_TEXT)


class TemplateRefIn(BaseModel):
    id: TemplateRef
    variables: dict[str, Any] | None = None


class SendEmailRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra=SEND_CONTENT)

    from_: Mailbox = Field(alias="from", examples=["Acme <hello@acme.test>"])
    to: Mailbox | Recipients = Field(description="At most 50 recipients in to, cc and bcc together")
    cc: Mailbox | Copies | None = None
    bcc: Mailbox | Copies | None = None
    reply_to: Mailbox | list[Mailbox] | None = None
    subject: Subject | None = None
    html: str | None = None
    text: str | None = None
    headers: dict[str, str] | None = Field(
        None,
        json_schema_extra=CUSTOM_HEADERS,
        description="At most 50; names are case-insensitive (each once); the service's own "
        "(From, To, Subject, Message-ID, Content-Type, X-Posthaste-* ...) are refused; "
        "'Name: value' fits 998 characters",
    )
    tags: TagMap | list[TagIn] | None = Field(
        None, description="At most 50, each name once (an object, or Resend's list)"
    )
    data: dict[str, Any] | None = None
    scheduled_at: Timestamp | None = Field(
        None, description="RFC 3339 with a time zone; up to 30 days ahead"
    )
    template: TemplateRef | TemplateRefIn | None = Field(
        None, description="Alias or id of a template"
    )
    template_id: TemplateRef | None = None
    stream_id: str | None = Field(
        None, min_length=1, description="One of your streams; default: transactional"
    )
    attachments: list[AttachmentIn] | None = Field(
        None, max_length=100, description="At most 100, 18 MiB decoded in all"
    )


class RescheduleRequest(BaseModel):
    scheduled_at: Timestamp | None


class EmailRecord(BaseModel):
    object: str = "email"
    id: str
    from_: str = Field(alias="from")
    to: list[str]
    cc: list[str]
    bcc: list[str]
    reply_to: list[str]
    subject: str
    html: str | None
    text: str | None
    headers: dict[str, str]
    tags: dict[str, str]
    status: str = Field(examples=["queued"])
    last_event: str
    created_at: str
    scheduled_at: str | None
    sent_at: str | None
    template_id: str | None
    stream_id: str
    broadcast_id: str | None
    message_id: str
    provider_message_id: str | None
    region: str
    origin: str = Field(
        description="The entry point it came through: api, batch, relay, broadcast, automation",
        examples=["api"],
    )


class EmailList(BaseModel):
    object: str = "list"
    data: list[EmailRecord]
    next_cursor: str = Field(description="Empty at the end")
    has_more: bool = Field(description="Resend's: more emails lie past this page, its way")


class BatchError(BaseModel):
    name: str
    message: str


class BatchEntry(BaseModel):
    index: int
    id: str | None = None
    error: BatchError | None = None


class BatchFailure(BaseModel):
    index: int
    message: str


class BatchResult(BaseModel):
    data: list[BatchEntry]
    errors: list[BatchFailure] | None = Field(
        default=None,
        description="Only with the header x-batch-validation: permissive: the failed items",
    )


class EventRecord(BaseModel):
    object: str = "event"
    id: str
    type: str = Field(examples=["email.delivered"])
    created_at: str
    data: dict[str, Any]


class EventList(BaseModel):
    object: str = "list"
    data: list[EventRecord]


class AttachmentRecord(BaseModel):
    object: str = "attachment"
    id: str
    filename: str
    content_type: str
    size: int
    content_id: str | None
    content_disposition: Literal["inline", "attachment"]
    download_url: str = Field(description="Fetches the file without a key until expires_at")
    expires_at: str


class AttachmentList(BaseModel):
    object: str = "list"
    data: list[AttachmentRecord]
    has_more: bool
