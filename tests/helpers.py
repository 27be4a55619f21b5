"""Small builders shared by the API and service tests."""

from __future__ import annotations

from typing import Any


def email_body(**overrides: Any) -> dict[str, Any]:
    """A valid send request; ``overrides`` replace or add fields."""
    return {
        "from": "Acme <hello@acme.test>",
        "to": "user@example.com",
        "subject": "Hello",
        "html": "<p>Hi</p>",
        **overrides,
    }
