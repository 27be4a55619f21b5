"""The error tree of Posthaste.

Every error a client can meet is a subclass of ``PosthasteError`` and carries a stable ``name``
(the ``name`` member of the error body). How a name maps to an HTTP status lives in
``posthaste.api.errors``; how it maps to an SMTP reply lives in ``posthaste.smtp.replies``.
Library errors are translated into this tree once, at the adapter that met them.

PosthasteError
 ├── ValidationError                  validation_error
 │    └── RecipientSuppressed         validation_error (a recipient is on the suppression list)
 │         └── RecipientUnsubscribed  validation_error (unsubscribed from broadcast-stream mail)
 ├── AuthError
 │    ├── MissingApiKey               missing_api_key
 │    ├── InvalidApiKey               invalid_api_key
 │    └── RestrictedApiKey            restricted_api_key
 ├── DomainError
 │    ├── DomainNotOwned              domain_not_owned
 │    └── DomainNotVerified           domain_not_verified
 ├── NotFound                         not_found
 ├── MethodNotAllowed                 method_not_allowed
 ├── IdempotencyError
 │    ├── InvalidIdempotencyKey       invalid_idempotency_key
 │    ├── InvalidIdempotentRequest    invalid_idempotent_request
 │    └── ConcurrentIdempotentRequests concurrent_idempotent_requests
 ├── Conflict                         conflict
 ├── TemplateNotPublished             template_not_published
 ├── PayloadTooLarge                  payload_too_large
 ├── LimitExceeded
 │    ├── RateLimitExceeded           rate_limit_exceeded
 │    └── DailyQuotaExceeded          daily_quota_exceeded
 ├── InternalServerError              internal_server_error
 └── ServiceUnavailable               service_unavailable

``ConfigError`` is not part of the client-facing tree: it stops the process at start.
"""

from __future__ import annotations


class PosthasteError(Exception):
    """Base of every client-facing error; ``name`` is the stable machine-readable code."""

    name = "internal_server_error"
    default_message = "An unexpected error occurred."

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)


class ValidationError(PosthasteError):
    name = "validation_error"
    default_message = "The request is invalid."


class RecipientSuppressed(ValidationError):
    """Kept apart from other validation errors for the relay's 550 5.1.1; same name over HTTP."""

    default_message = "A recipient is on the suppression list."


class RecipientUnsubscribed(RecipientSuppressed):
    """A recipient of mail on a broadcast stream is one of the team's unsubscribed contacts;
    its own relay reply (550 5.7.1), counted as ``skipped_unsubscribed`` by broadcasts."""

    default_message = "A recipient unsubscribed from broadcast mail."


class AuthError(PosthasteError):
    pass


class MissingApiKey(AuthError):
    name = "missing_api_key"
    default_message = "Missing API key. Send the header 'Authorization: Bearer <API_KEY>'."


class InvalidApiKey(AuthError):
    name = "invalid_api_key"
    default_message = "API key is invalid or was revoked."


class RestrictedApiKey(AuthError):
    name = "restricted_api_key"
    default_message = (
        "This API key is restricted to sending emails; use a full_access key for this endpoint."
    )


class DomainError(PosthasteError):
    pass


class DomainNotOwned(DomainError):
    name = "domain_not_owned"
    default_message = "The sending domain is owned by another team."


class DomainNotVerified(DomainError):
    name = "domain_not_verified"
    default_message = "The sending domain is not verified for this team."


class NotFound(PosthasteError):
    name = "not_found"
    default_message = "The requested resource was not found."


class MethodNotAllowed(PosthasteError):
    name = "method_not_allowed"
    default_message = "Method not allowed on this resource."


class IdempotencyError(PosthasteError):
    pass


class InvalidIdempotencyKey(IdempotencyError):
    name = "invalid_idempotency_key"
    default_message = "The Idempotency-Key must be 1 to 256 characters."


class InvalidIdempotentRequest(IdempotencyError):
    name = "invalid_idempotent_request"
    default_message = "This Idempotency-Key was already used with a different request body."


class ConcurrentIdempotentRequests(IdempotencyError):
    name = "concurrent_idempotent_requests"
    default_message = "A request with this Idempotency-Key is still in progress; retry later."


class Conflict(PosthasteError):
    name = "conflict"
    default_message = "The request conflicts with the current state of the resource."


class TemplateNotPublished(PosthasteError):
    name = "template_not_published"
    default_message = "The template is not published; publish it or send with a test key."


class PayloadTooLarge(PosthasteError):
    name = "payload_too_large"
    default_message = "The request body is larger than the 25 MiB limit."


class LimitExceeded(PosthasteError):
    """A rate or quota limit; ``retry_after`` is in whole seconds."""

    def __init__(
        self, message: str | None = None, *, retry_after: int, limit: int, reset: int
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit
        self.reset = reset


class RateLimitExceeded(LimitExceeded):
    name = "rate_limit_exceeded"
    default_message = "Too many requests; slow down and retry after the Retry-After delay."


class DailyQuotaExceeded(LimitExceeded):
    name = "daily_quota_exceeded"
    default_message = "The team's daily sending quota is used up; it resets at 00:00 UTC."


class InternalServerError(PosthasteError):
    name = "internal_server_error"
    default_message = "An unexpected error occurred; it has been logged."


class ServiceUnavailable(PosthasteError):
    name = "service_unavailable"
    default_message = "The service is temporarily unavailable; retry shortly."


class ConfigError(Exception):
    """A setting is missing or invalid; the process refuses to start with this one-line message."""
