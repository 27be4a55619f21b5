"""The error → SMTP reply table of the relay (PRODUCT §12, §11), the twin of ``api/errors.py``.

Keyed by error class, most specific first along the class's MRO, so that a suppressed recipient
(``RecipientSuppressed``, named ``validation_error`` over HTTP like any invalid field) can answer
550 5.1.1 while other invalid content answers 554 5.6.0. Anything that is not a Posthaste error
(the database down, a bug) answers 451 4.3.0: the client keeps the message and retries.

``ENHANCED`` gives aiosmtpd's own fixed error replies an enhanced status code (RFC 3463). The
relay does not advertise ENHANCEDSTATUSCODES: the DATA reply is ``250 OK`` and the email's id
(docs/smtp.md), without one.
"""

from __future__ import annotations

from dataclasses import dataclass

from posthaste import errors


@dataclass(frozen=True)
class Reply:
    code: int
    status: str  # the RFC 3463 enhanced status code
    text: str

    def line(self, detail: str | None = None) -> str:
        """``550 5.7.1 text``, the detail (one line, ASCII) replacing the generic text."""
        return f"{self.code} {self.status} {_one_line(detail or self.text)}"


INTERNAL = Reply(451, "4.3.0", "Temporary server error; retry later")

REPLIES: dict[type[errors.PosthasteError], Reply] = {
    errors.RecipientUnsubscribed: Reply(550, "5.7.1", "A recipient unsubscribed from this mail"),
    errors.RecipientSuppressed: Reply(550, "5.1.1", "A recipient is on the suppression list"),
    errors.ValidationError: Reply(554, "5.6.0", "The message is invalid"),
    errors.MissingApiKey: Reply(530, "5.7.0", "Authentication required"),
    errors.InvalidApiKey: Reply(535, "5.7.8", "Authentication credentials invalid"),
    errors.RestrictedApiKey: Reply(535, "5.7.8", "This API key may not send"),
    errors.DomainNotOwned: Reply(550, "5.7.1", "The sending domain is owned by another team"),
    errors.DomainNotVerified: Reply(550, "5.7.1", "The sending domain is not verified"),
    errors.TemplateNotPublished: Reply(554, "5.6.0", "The template is not published"),
    errors.NotFound: Reply(554, "5.6.0", "Not found"),
    errors.MethodNotAllowed: Reply(502, "5.5.1", "Command not implemented"),
    errors.Conflict: Reply(554, "5.6.0", "Conflict"),
    errors.InvalidIdempotencyKey: Reply(554, "5.6.0", "Invalid X-Posthaste-Idempotency-Key"),
    errors.InvalidIdempotentRequest: Reply(
        554, "5.6.0", "X-Posthaste-Idempotency-Key was used for another message"
    ),
    errors.ConcurrentIdempotentRequests: Reply(
        451, "4.5.0", "A message with this X-Posthaste-Idempotency-Key is still in progress"
    ),
    errors.PayloadTooLarge: Reply(552, "5.3.4", "Message size exceeds fixed maximum size"),
    errors.RateLimitExceeded: Reply(451, "4.7.1", "Rate limit exceeded; slow down"),
    errors.DailyQuotaExceeded: Reply(452, "4.5.3", "Daily sending quota used up"),
    errors.ServiceUnavailable: INTERNAL,
    errors.InternalServerError: INTERNAL,
}

ENHANCED: dict[str, str] = {
    "530 Must issue a STARTTLS command first": "530 5.7.0 Must issue a STARTTLS command first",
    "538 5.7.11 Encryption required for requested authentication mechanism": (
        "530 5.7.0 Must issue a STARTTLS command first"
    ),
    "552 Error: Too much mail data": "552 5.3.4 Message size exceeds fixed maximum size",
    "503 Error: send EHLO first": "503 5.5.1 Send EHLO first",
    "503 Error: send HELO first": "503 5.5.1 Send HELO first",
    "503 Error: need MAIL command": "503 5.5.1 Need MAIL command",
    "503 Error: need RCPT command": "503 5.5.1 Need RCPT command",
    "503 Error: nested MAIL command": "503 5.5.1 Nested MAIL command",
    "503 Already authenticated": "503 5.5.1 Already authenticated",
    "500 Line too long (see RFC5321 4.5.3.1.6)": "500 5.5.2 Line too long (RFC 5321 4.5.3.1.6)",
    "454 TLS not available": "454 4.7.0 TLS not available",
    "500 Error: bad syntax": "500 5.5.2 Syntax error",
    "500 Error: strict ASCII mode": "500 5.5.2 Syntax error: only ASCII here",
    "501 Error: SMTPUTF8 takes no arguments": "501 5.5.4 SMTPUTF8 takes no arguments",
    "552 Error: message size exceeds fixed maximum message size": (
        "552 5.3.4 Message size exceeds fixed maximum size"
    ),
}


def reply_for(error: BaseException) -> Reply:
    """The reply for an error: its class's entry, else its nearest ancestor's, else 451 4.3.0."""
    for cls in type(error).__mro__:
        reply = REPLIES.get(cls)
        if reply is not None:
            return reply
    return INTERNAL


def reply_line(error: BaseException) -> str:
    """The full reply line for an error; client errors say what is wrong, others stay generic."""
    reply = reply_for(error)
    if isinstance(error, errors.PosthasteError) and reply is not INTERNAL:
        return reply.line(error.message)
    return reply.line()


def _one_line(text: str) -> str:
    """Reply text is one ASCII line (RFC 5321 §4.2): no CR/LF, non-ASCII replaced."""
    flat = " ".join(text.split())
    return flat.encode("ascii", "replace").decode("ascii")[:400]
