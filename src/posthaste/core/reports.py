"""What a message to a VERP address says about the email it names: one pure function.

Mail to ``bounces+<token>@send.<domain>`` is about an email we sent: a delivery status
notification (RFC 3464: ``multipart/report; report-type=delivery-status``, one
``message/delivery-status`` part with a block of fields per recipient, or RFC 6533's
``message/global-delivery-status``), a complaint (RFC 5965 ARF: ``report-type=feedback-report``,
a ``message/feedback-report`` part), an auto-reply (RFC 3834 ``Auto-Submitted``, the
``X-Autoreply``/``X-Autorespond`` and ``Precedence: auto_reply`` flags, "Out of Office"
subjects), or something else. ``classify_report`` tells them apart, never raises, and returns
only what the message says; what it does to the email is decided by the service
(``services.inbound``), with the status machine's rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from enum import StrEnum

from posthaste.core.inbound import lookup_key, parse_message

_STATUS = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})")
_ACTIONS = frozenset({"failed", "delayed", "delivered", "relayed", "expanded"})
_DSN_TYPES = ("message/delivery-status", "message/global-delivery-status")
_ARF_TYPES = ("message/feedback-report",)
_COMPLAINT_TYPES = frozenset({"abuse", "fraud"})
_AUTO_FLAGS = ("x-autoreply", "x-autorespond", "x-autoresponder")
_AUTO_SUBJECTS = re.compile(
    r"^\s*(auto(matic)?[ -]?(reply|response)|out of (the )?office|autoreply|auto:|abwesenheit"
    r"|absence|r[ée]ponse automatique|away from)",
    re.IGNORECASE,
)
_HEADER_PARSER = HeaderParser()


class ReportKind(StrEnum):
    DSN = "dsn"
    COMPLAINT = "complaint"
    AUTO_REPLY = "auto_reply"
    UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class RecipientStatus:
    """One recipient's block of a DSN: lookup form of the address, action, RFC 3463 status."""

    recipient: str
    action: str  # failed | delayed | delivered | relayed | expanded
    status: str  # "5.1.1"
    diagnostic: str


@dataclass(frozen=True)
class Report:
    kind: ReportKind
    recipients: tuple[RecipientStatus, ...] = ()  # DSN: one per recipient block
    complainants: tuple[str, ...] = ()  # ARF: the recipients who complained, when named
    feedback_type: str | None = None


UNPARSEABLE = Report(ReportKind.UNPARSEABLE)


def classify_report(raw: bytes) -> Report:
    """What a message to a VERP address is (never raises: anything unreadable is
    ``unparseable``)."""
    try:
        message = parse_message(raw)
        return _classify(message)
    except Exception:  # malformed mail must never stop the inbound server
        return UNPARSEABLE


def _classify(message: Message) -> Report:
    if message.get_content_type() == "multipart/report":
        for part in message.walk():
            if part.get_content_type() in _DSN_TYPES:
                return _dsn(part)
            if part.get_content_type() in _ARF_TYPES:
                return _arf(message, part)
        return UNPARSEABLE
    if _is_auto_reply(message):
        return Report(ReportKind.AUTO_REPLY)
    return UNPARSEABLE


def _dsn(part: Message) -> Report:
    recipients = tuple(r for block in _blocks(part)[1:] if (r := _recipient_status(block)))
    return Report(ReportKind.DSN, recipients) if recipients else UNPARSEABLE


def _recipient_status(block: Message) -> RecipientStatus | None:
    address = _typed_address(block.get("final-recipient") or block.get("original-recipient"))
    action = _text(block.get("action")).lower()
    if address is None or action not in _ACTIONS:
        return None
    found = _STATUS.match(_text(block.get("status")))
    if found is not None:
        status = ".".join(found.groups())
    else:  # a block without a usable status: what its action implies
        status = {"failed": "5.0.0", "delayed": "4.0.0"}.get(action, "2.0.0")
    diagnostic = _typed_text(block.get("diagnostic-code")) or status
    return RecipientStatus(address, action, status, diagnostic[:1000])


def _arf(message: Message, part: Message) -> Report:
    blocks = _blocks(part)
    if not blocks:
        return UNPARSEABLE
    fields = blocks[0]
    feedback_type = _text(fields.get("feedback-type")).lower()
    if feedback_type not in _COMPLAINT_TYPES:
        return Report(ReportKind.UNPARSEABLE, feedback_type=feedback_type or None)
    named = [lookup_key(_text(v)) for v in fields.get_all("original-rcpt-to") or []]
    if not named:
        named = _enclosed_recipients(message)
    complainants = tuple(dict.fromkeys(a for a in named if "@" in a))
    return Report(ReportKind.COMPLAINT, complainants=complainants, feedback_type=feedback_type)


def _enclosed_recipients(message: Message) -> list[str]:
    """The To of the reported message (its headers or the whole message), when shown."""
    for part in message.walk():
        kind = part.get_content_type()
        payload = part.get_payload()
        if kind == "text/rfc822-headers":
            headers = _HEADER_PARSER.parsestr(_payload_text(part))
        elif kind == "message/rfc822" and isinstance(payload, list) and payload:
            enclosed = payload[0]
            if not isinstance(enclosed, Message):
                continue
            headers = enclosed
        else:
            continue
        found: list[str] = []
        for value in headers.get_all("to") or []:
            found += [lookup_key(a) for a in re.findall(r"[^\s<>,;\"]+@[^\s<>,;\"]+", str(value))]
        return found
    return []


def _blocks(part: Message) -> list[Message]:
    """The field blocks of a report part: what the stdlib parsed, or the text split on blank
    lines (``message/global-delivery-status`` arrives as text)."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return [block for block in payload if isinstance(block, Message)]
    text = _payload_text(part).replace("\r\n", "\n")
    return [_HEADER_PARSER.parsestr(chunk) for chunk in re.split(r"\n\s*\n", text) if chunk.strip()]


def _payload_text(part: Message) -> str:
    data = part.get_payload(decode=True)
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else ""


def _is_auto_reply(message: Message) -> bool:
    auto = _text(message.get("auto-submitted")).lower()
    if auto and not auto.startswith("no"):
        return True
    if any(message.get(flag) is not None for flag in _AUTO_FLAGS):
        return True
    if _text(message.get("precedence")).lower() == "auto_reply":
        return True
    return bool(_AUTO_SUBJECTS.match(_text(message.get("subject"))))


def _typed_address(value: object) -> str | None:
    """``rfc822; ann@example.com`` (RFC 3464 address-type; address) in lookup form."""
    text = _typed_text(value)
    if not text or "@" not in text:
        return None
    return lookup_key(text.strip("<>"))


def _typed_text(value: object) -> str:
    text = _text(value)
    _, sep, rest = text.partition(";")
    return rest.strip() if sep else text


def _text(value: object) -> str:
    return "" if value is None else " ".join(str(value).split())
