"""Domain records returned by the repositories (never database rows)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, TypeVar

from posthaste.core.jobs import JobKind
from posthaste.core.status import EmailStatus

R = TypeVar("R")
_FIELDS: dict[type, frozenset[str]] = {}


def assembled(cls: type[R], values: dict[str, Any]) -> R:
    """A frozen dataclass's instance with ``values`` (every field, by name; the dict is kept),
    made without its generated ``__init__``, which sets each field through
    ``object.__setattr__``: for the 27 fields of an ``Email`` that was ~13x the cost of this, a
    few µs for every email of a batch (bench/README.md, Accepting email). Defaults are not
    applied: a field missing from ``values`` (or a name that is not a field) raises."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    if values.keys() != names:
        raise TypeError(f"{cls.__name__} takes {sorted(names)}, got {sorted(values)}")
    made = object.__new__(cls)
    object.__setattr__(made, "__dict__", values)
    return made


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

    @property
    def sender(self) -> Sender:
        return Sender(self.team, self.key)


class Origin(StrEnum):
    """Which entry point an email came through (stored on the email, PRODUCT §13's metrics)."""

    API = "api"
    BATCH = "batch"
    RELAY = "relay"
    BROADCAST = "broadcast"
    AUTOMATION = "automation"


@dataclass(frozen=True)
class Sender:
    """Whom a send is for: the team, and the API key it came through; no key for the system's
    own senders (broadcasts, automations), which send as live mail with no domain restriction."""

    team: Team
    key: ApiKey | None = None
    # A system sender's mode: the mode of the key that set it up (a test key's automation
    # sends test mail).
    system_mode: KeyMode = KeyMode.LIVE

    @property
    def team_id(self) -> str:
        return self.team.id

    @property
    def mode(self) -> KeyMode:
        return self.system_mode if self.key is None else self.key.mode

    @property
    def is_test(self) -> bool:
        return self.mode is KeyMode.TEST

    @property
    def domain_id(self) -> str | None:
        """The one domain the key may send from, if it is restricted to one."""
        return None if self.key is None else self.key.domain_id


@dataclass(frozen=True)
class Stream:
    id: str
    team_id: str
    name: str
    type: str
    created_at: int
    pool: str | None = None  # the IP pool its mail leaves from (core/pools.py); None: none


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file given with a send; a ``content_id`` makes it inline, referenced as ``cid:<id>``."""

    filename: str
    content_type: str
    content: bytes
    content_id: str | None = None


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
    origin: Origin = Origin.API


@dataclass(frozen=True)
class EmailSummary:
    """What an event about an email carries of it (``email_event_data``), without its content:
    read for events recorded apart from delivery (opens, clicks)."""

    id: str
    team_id: str
    from_address: str
    to: list[str]
    subject: str
    created_at: int
    tags: dict[str, str]
    message_id: str


@dataclass(frozen=True)
class NewEmail:
    """An accepted email and what is stored beside it, as the send path hands it to storage."""

    email: Email
    from_lookup: str  # the From address's lookup form (the ``from`` filter)
    recipients: list[tuple[str, str]]  # unique (lookup address, kind) pairs
    attachments: list[Attachment]
    # A relay submission's message, kept as submitted, in parts (header lines the send path
    # added, then the submitted bytes, or a view of them from the body on when header fields
    # were removed): joined only where the database needs one buffer.
    raw: tuple[bytes | memoryview, ...] | None


@dataclass(frozen=True)
class NewJob:
    """A job to enqueue: ``kind`` on ``ref`` (an email id, a domain id …), due at ``due_at``."""

    kind: JobKind
    ref: str
    team_id: str | None
    due_at: int


@dataclass(frozen=True)
class Event:
    id: str
    team_id: str
    type: str  # an ``EventType`` value (``core.events``)
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
    attempts: int  # claims so far, this one included: the fencing token
    holds: int = 0  # of those, the ones that ended held for a busy destination, unsent

    @property
    def tries(self) -> int:
        """The claims that counted: those that did not end in a hold."""
        return self.attempts - self.holds


# Templates (issue 5)


@dataclass(frozen=True)
class TemplateVariable:
    """A declared variable; ``fallback_value`` None means none (a send must give a value)."""

    key: str
    fallback_value: str | int | float | bool | None = None
    type: str | None = None


@dataclass(frozen=True)
class TemplateVersion:
    """One immutable content version of a template."""

    id: str
    template_id: str
    subject: str | None
    html: str | None
    text: str | None
    variables: list[TemplateVariable]

    def fallbacks(self) -> dict[str, object]:
        return {v.key: v.fallback_value for v in self.variables if v.fallback_value is not None}


@dataclass(frozen=True)
class Template:
    """A template: ``draft`` is its latest content; sends with live keys use the published one."""

    id: str
    team_id: str
    name: str
    alias: str | None
    draft: TemplateVersion
    published_version_id: str | None
    published_at: int | None
    created_at: int
    updated_at: int

    @property
    def status(self) -> str:
        return "draft" if self.published_version_id is None else "published"

    @property
    def has_unpublished_changes(self) -> bool:
        """True when edits made after the last publish wait for the next one."""
        return self.published_version_id not in (None, self.draft.id)
