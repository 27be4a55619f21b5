"""Broadcasts as callers describe them, and what each recipient's email says (pure, no I/O).

Decisions (docs/audiences.md):

- A broadcast is created as a ``draft``; ``send`` (or ``send: true`` on create) makes it
  ``scheduled`` (a future ``scheduled_at``) or ``sending``; expansion ends ``sent``. A scheduled
  or sending broadcast can be ``cancelled``; one whose content cannot be sent any more (its
  domain lost its verification, its template was deleted) ends ``failed`` with ``error``.
- Resend's names are accepted beside ours: ``audience_id`` for ``segment_id``, ``template_id``
  or ``template: {id, variables}`` for ``template``, ``variables`` for ``data``.
- Each recipient's content is rendered with ``data`` and ``contact`` (``email``,
  ``first_name``, ``last_name``, ``properties``) and ``unsubscribe_url``. A contact field the
  contact lacks renders empty rather than stopping its email. In the subject, a contact value's
  line breaks and other control characters become spaces (a subject is one header line).
- ``preview_text`` becomes the inbox preview: a hidden first element of the html.
"""

from __future__ import annotations

import functools
import html as html_lib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import Enum, StrEnum
from typing import Any

from posthaste.core.addresses import parse_address, parse_address_list
from posthaste.core.contacts import Contact
from posthaste.core.headers import validate_subject
from posthaste.core.ids import is_uuid
from posthaste.core.models import Email
from posthaste.core.send_request import (
    optional_text,
    scheduled_at_of,
    stream_id_of,
    template_data,
    template_ref,
)
from posthaste.core.templates import (
    MAX_RENDERED_LENGTH,
    ParsedContent,
    ParsedTemplate,
    RenderedContent,
    Values,
    missing_variables_error,
)
from posthaste.core.text import json_type
from posthaste.errors import (
    DailyQuotaExceeded,
    PosthasteError,
    RecipientSuppressed,
    RecipientUnsubscribed,
    ValidationError,
)

DEFAULT_STREAM = "broadcast"
DAY_MS = 86_400_000
MAX_NAME_LENGTH = 200
MAX_PREVIEW_LENGTH = 500
_CONTROL_RUN = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


class BroadcastStatus(StrEnum):
    DRAFT = "draft"
    SCHEDULED = "scheduled"
    SENDING = "sending"
    SENT = "sent"
    CANCELLED = "cancelled"
    FAILED = "failed"


UNDER_WAY = (BroadcastStatus.SCHEDULED, BroadcastStatus.SENDING)


@dataclass(frozen=True)
class BroadcastContent:
    """What a draft says and whom it goes to; editable until it is sent."""

    segment_id: str
    from_: str  # formatted: ``Name <address>`` or the bare address
    name: str | None = None
    subject: str | None = None
    html: str | None = None
    text: str | None = None
    template: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    reply_to: list[str] = field(default_factory=list)
    stream_id: str = DEFAULT_STREAM
    topic_id: str | None = None
    preview_text: str | None = None


@dataclass(frozen=True)
class BroadcastCounts:
    """What became of the members expanded so far (``recipients`` is their number)."""

    recipients: int = 0
    sent: int = 0
    skipped_unsubscribed: int = 0
    skipped_suppressed: int = 0
    skipped_topic: int = 0
    failed: int = 0

    def __add__(self, other: BroadcastCounts) -> BroadcastCounts:
        return BroadcastCounts(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Broadcast:
    id: str
    team_id: str
    api_key_id: str | None  # the key it was sent with: its mode and domain restriction apply
    content: BroadcastContent
    status: BroadcastStatus
    created_at: int
    updated_at: int
    scheduled_at: int | None = None
    sent_at: int | None = None  # when expansion finished
    resumes_at: int | None = None  # paused by the daily quota until then
    error: str | None = None
    cursor: str | None = None  # the last contact id counted
    counts: BroadcastCounts = BroadcastCounts()


@dataclass(frozen=True)
class SendOrder:
    """``send: true`` on create, or ``POST /broadcasts/{id}/send``: when to start."""

    scheduled_at: int | None  # None: now


@dataclass(frozen=True)
class Member:
    """A segment member as expansion reads it: the contact and its own choice for the
    broadcast's topic (None: it never chose)."""

    contact: Contact
    topic_choice: str | None = None


class Skip(StrEnum):
    UNSUBSCRIBED = "skipped_unsubscribed"
    TOPIC = "skipped_topic"


def skip_reason(member: Member, topic_default: str | None) -> Skip | None:
    """Why a member gets no email before the send path is asked (suppression is its to say)."""
    if member.contact.unsubscribed:
        return Skip.UNSUBSCRIBED
    if topic_default is not None:
        chosen = member.topic_choice if member.topic_choice is not None else topic_default
        if chosen != "opt_in":
            return Skip.TOPIC
    return None


def parse_broadcast(
    fields_: Mapping[str, Any], now: int, current: BroadcastContent | None = None
) -> BroadcastContent:
    """``POST /broadcasts``' body (``current`` None) or ``PATCH``'s, applied to ``current``."""
    body = dict(fields_)
    changes: dict[str, Any] = {}
    segment = fields_.get("segment_id", fields_.get("audience_id"))
    if segment is not None or current is None:
        changes["segment_id"] = _uuid(segment, "segment_id")
    if "from" in fields_ or current is None:
        changes["from_"] = _from(fields_.get("from"))
    for name in ("subject", "html", "text"):
        if name in fields_:
            changes[name] = _subject(body) if name == "subject" else optional_text(body, name)
    if "name" in fields_:
        changes["name"] = _short_text(fields_.get("name"), "name", MAX_NAME_LENGTH)
    if "preview_text" in fields_:
        changes["preview_text"] = _short_text(
            fields_.get("preview_text"), "preview_text", MAX_PREVIEW_LENGTH
        )
    if any(key in fields_ for key in ("template", "template_id")):
        changes["template"] = template_ref(body)
    if any(key in fields_ for key in ("data", "variables")) or isinstance(
        fields_.get("template"), dict
    ):
        changes["data"] = template_data({**body, "data": body.get("data", body.get("variables"))})
    if "reply_to" in fields_:
        changes["reply_to"] = [
            a.formatted() for a in parse_address_list(fields_.get("reply_to"), "reply_to")
        ]
    if "stream_id" in fields_:
        changes["stream_id"] = stream_id_of(fields_.get("stream_id")) or DEFAULT_STREAM
    if "topic_id" in fields_:
        topic = fields_.get("topic_id")
        changes["topic_id"] = None if topic is None else _uuid(topic, "topic_id")
    if current is None:
        return BroadcastContent(**changes)
    return replace(current, **changes)


def parse_send_order(fields_: Mapping[str, Any], now: int) -> SendOrder:
    """``scheduled_at`` (RFC 3339, up to 30 days ahead; a past time is now)."""
    return SendOrder(scheduled_at_of(fields_.get("scheduled_at"), now))


def wants_send(fields_: Mapping[str, Any]) -> bool:
    """``send: true`` on create; ``scheduled_at`` without it is refused (it would be lost)."""
    send = fields_.get("send", False)
    if not isinstance(send, bool):
        raise ValidationError(f"'send' must be true or false, got {json_type(send)}.")
    if not send and fields_.get("scheduled_at") is not None:
        raise ValidationError("'scheduled_at' needs 'send': true (or POST /broadcasts/{id}/send).")
    return send


def check_complete(content: BroadcastContent) -> None:
    """What sending needs beyond a draft: a subject and a body, or a template."""
    if content.template is not None:
        return
    if content.subject is None:
        raise ValidationError("The broadcast has no 'subject' (and no 'template'); set one.")
    if content.html is None and content.text is None:
        raise ValidationError("The broadcast has no 'html' or 'text' (and no 'template'); set one.")


def recipient_data(
    data: Mapping[str, Any], contact: Contact, unsubscribe_url: str
) -> dict[str, Any]:
    """The variables of one recipient's rendering: ``data``, ``contact`` and ``unsubscribe_url``."""
    return {
        **data,
        "contact": {
            "id": contact.id,
            "email": contact.email,
            "first_name": contact.first_name or "",
            "last_name": contact.last_name or "",
            "properties": contact.properties,
        },
        "unsubscribe_url": unsubscribe_url,
    }


_MEMBER_ROOTS = frozenset({"contact", "unsubscribe_url"})  # what recipient_data sets per member


class _Mode(Enum):
    """How a member's field goes into its template."""

    AS_IS = "as it is (subject, text, raw placeholders)"
    ESCAPED = "HTML-escaped (html)"
    ONE_LINE = "on one line (a contact field in the subject)"


_Field = tuple[str, _Mode]  # a placeholder's path, and how its text goes in


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A template with its constant placeholders substituted: ``form``, a ``str.format`` form
    whose ``{n}`` is the text of ``fields[n]``; or, when a constant placeholder has no value,
    its ``missing`` error, raised after the fields that come before it (in ``fields``)."""

    form: str
    fields: tuple[_Field, ...]
    missing: ValidationError | None = None


class MemberContent:
    """A broadcast's content compiled once for all its members: placeholders of ``data`` and
    the fallbacks are substituted at once, and only the fields that vary by member
    (``contact.*``, ``unsubscribe_url``) are filled in per member, each worked out once.

    Renders exactly what rendering the whole content with ``recipient_data`` does: a
    ``contact.*`` placeholder without a value renders empty, any other without a value or
    fallback is a ``ValidationError`` (the first in the content's order), a contact field in
    the subject stays on one line. (One difference, in errors only: content both longer than
    ``MAX_RENDERED_LENGTH`` and missing a value is refused for the missing value.)"""

    def __init__(
        self,
        parsed: ParsedContent,
        fallbacks: Mapping[str, object],
        data: Mapping[str, Any],
        preview_text: str | None,
    ) -> None:
        self._data = data
        self._fallbacks = {**_contact_blanks(parsed), **fallbacks}
        constant = Values(data, self._fallbacks)
        self._subject = _compiled(parsed.subject, constant, escape_html=False, subject=True)
        self._html = _compiled(parsed.html, constant, escape_html=True, subject=False)
        self._text = _compiled(parsed.text, constant, escape_html=False, subject=False)
        self._preview = _preview(preview_text) if preview_text else ""

    def render(self, contact: Contact, unsubscribe_url: str) -> RenderedContent:
        """One member's subject, html and text."""
        values = Values(recipient_data(self._data, contact, unsubscribe_url), self._fallbacks)
        subject = None
        if self._subject is not None:
            subject = validate_subject(_filled(self._subject, values))
        html = None if self._html is None else _filled(self._html, values)
        if html is not None and self._preview:
            html = self._preview + html
        text = None if self._text is None else _filled(self._text, values)
        return RenderedContent(subject, html, text)


def _compiled(
    template: ParsedTemplate | None, constant: Values, *, escape_html: bool, subject: bool
) -> _Compiled | None:
    if template is None:
        return None
    form: list[str] = []
    fields: dict[_Field, int] = {}
    for part in template.parts:
        if isinstance(part, str):
            form.append(_literal(part))
            continue
        path = part.path
        if path.split(".", 1)[0] in _MEMBER_ROOTS:
            mode = _Mode.ESCAPED if escape_html and not part.raw else _Mode.AS_IS
            if subject and (path == "contact" or path.startswith("contact.")):
                mode = _Mode.ONE_LINE
            form.append(f"{{{fields.setdefault((path, mode), len(fields))}}}")
            continue
        text = constant.text_of(path)
        if text is None:
            return _Compiled("", tuple(fields), missing_variables_error([path]))
        if escape_html and not part.raw:
            text = constant.escaped_text_of(path, text)
        form.append(_literal(text))
    return _Compiled("".join(form), tuple(fields))


def _literal(text: str) -> str:
    """``text`` as the literal part of a ``str.format`` form."""
    return text.replace("{", "{{").replace("}", "}}")


def _filled(template: _Compiled, values: Values) -> str:
    texts: list[str] = []
    for path, mode in template.fields:
        text = values.text_of(path)
        if text is None:
            raise missing_variables_error([path])
        if mode is _Mode.ESCAPED:
            text = values.escaped_text_of(path, text)
        elif mode is _Mode.ONE_LINE:
            text = _CONTROL_RUN.sub(" ", text).strip()
        texts.append(text)
    if template.missing is not None:
        raise template.missing
    rendered = template.form.format(*texts)
    if len(rendered) > MAX_RENDERED_LENGTH:
        raise ValidationError(
            f"The rendered content is longer than {MAX_RENDERED_LENGTH} characters; "
            "send smaller values in 'data'."
        )
    return rendered


@functools.lru_cache(maxsize=64)
def _contact_blanks(parsed: ParsedContent) -> dict[str, str]:
    """An empty value for every ``contact.*`` placeholder of the content (parsed once)."""
    return {
        path: ""
        for template in (parsed.subject, parsed.html, parsed.text)
        if template is not None
        for path in template.placeholders
        if path.startswith("contact.")
    }


def _preview(text: str) -> str:
    hidden = "display:none;max-height:0;overflow:hidden;mso-hide:all"
    return f'<div style="{hidden}">{html_lib.escape(text)}</div>'


def _uuid(value: object, name: str) -> str:
    if not isinstance(value, str) or not is_uuid(value):
        raise ValidationError(f"'{name}' is required: the id of one of your {name[:-3]}s.")
    return value.lower()


def _from(value: object) -> str:
    if value is None:
        raise ValidationError("The 'from' field is required.")
    if not isinstance(value, str):
        raise ValidationError("The 'from' field must be a string.")
    return parse_address(value, "from").formatted()


def _subject(fields_: Mapping[str, Any]) -> str | None:
    value = fields_.get("subject")
    return None if value is None else validate_subject(value)


def _short_text(value: object, name: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or _CONTROL_RUN.search(value):
        raise ValidationError(
            f"'{name}' must be one line of at most {limit} characters, got {json_type(value)}."
        )
    return value.strip() or None


@dataclass(frozen=True)
class ChunkTally:
    """What one chunk's members became: the counts, the last member counted (the new cursor;
    None when none was), and the quota refusal that stopped the chunk there, if any."""

    counts: BroadcastCounts
    cursor: str | None
    quota: DailyQuotaExceeded | None = None


def tally_chunk(
    plan: Sequence[tuple[Member, Skip | None]], outcomes: Sequence[Email | PosthasteError]
) -> ChunkTally:
    """Count the chunk's members in order: ``plan`` gives each member its skip reason (None:
    handed to the send path), ``outcomes`` the send path's answer for each member handed to it.
    The first member refused by the daily quota ends the tally: it and those after it were
    not mailed, and are read again when the quota allows."""
    answers = iter(outcomes)
    totals = dict.fromkeys((f.name for f in fields(BroadcastCounts)), 0)
    cursor = None
    for member, skip in plan:
        if skip is None:
            answer = next(answers)
            if isinstance(answer, DailyQuotaExceeded):
                return ChunkTally(BroadcastCounts(**totals), cursor, answer)
            totals[_counted_as(answer)] += 1
        else:
            totals[skip.value] += 1
        totals["recipients"] += 1
        cursor = member.contact.id
    return ChunkTally(BroadcastCounts(**totals), cursor)


def _counted_as(answer: Email | PosthasteError) -> str:
    if isinstance(answer, RecipientUnsubscribed):  # unsubscribed since the chunk was read
        return "skipped_unsubscribed"
    if isinstance(answer, RecipientSuppressed):
        return "skipped_suppressed"
    return "failed" if isinstance(answer, PosthasteError) else "sent"


def next_utc_day(now: int) -> int:
    """When the daily quota resets: the next 00:00 UTC (ms)."""
    return (now // DAY_MS + 1) * DAY_MS
