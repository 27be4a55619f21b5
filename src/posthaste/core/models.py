"""Domain records returned by the repositories (never database rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from posthaste.core.status import EmailStatus


class KeyMode(StrEnum):
    LIVE = "live"
    TEST = "test"


class Permission(StrEnum):
    FULL_ACCESS = "full_access"
    SENDING_ACCESS = "sending_access"


@dataclass(frozen=True)
class Team:
    id: str
    name: str
    rate_limit: int
    daily_quota: int
    created_at: int


@dataclass(frozen=True)
class ApiKey:
    id: str
    team_id: str
    name: str
    token_hint: str
    mode: KeyMode
    permission: Permission
    domain_id: str | None
    created_at: int
    last_used_at: int | None
    revoked_at: int | None


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's team, mode and permission, plus the team's limits."""

    team: Team
    key: ApiKey

    @property
    def team_id(self) -> str:
        return self.team.id

    @property
    def is_test(self) -> bool:
        return self.key.mode is KeyMode.TEST


@dataclass(frozen=True)
class Stream:
    id: str
    team_id: str
    name: str
    type: str
    created_at: int


@dataclass(frozen=True)
class AttachmentInfo:
    id: str
    email_id: str
    filename: str
    content_type: str
    size: int
    content_id: str | None
    blob_id: str


@dataclass(frozen=True)
class Email:
    id: str
    team_id: str
    mode: KeyMode
    from_address: str
    to: list[str]
    cc: list[str]
    bcc: list[str]
    reply_to: list[str]
    subject: str
    html: str | None
    text: str | None
    headers: dict[str, str]
    tags: dict[str, str]
    status: EmailStatus
    last_event: str
    created_at: int
    scheduled_at: int | None
    sent_at: int | None
    template_id: str | None
    stream_id: str
    broadcast_id: str | None
    message_id: str
    provider_message_id: str | None
    region: str
    raw_blob_id: str | None = None
    attempts: int = 0


@dataclass(frozen=True)
class Event:
    id: str
    team_id: str
    type: str
    email_id: str | None
    created_at: int
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Suppression:
    id: str
    team_id: str
    email: str
    origin: str
    source_email_id: str | None
    created_at: int


@dataclass(frozen=True)
class Job:
    id: int
    kind: str
    ref: str
    team_id: str | None
    attempts: int
