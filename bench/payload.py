"""The request bodies: a realistic small transactional email, alone or in batches of 100."""

from __future__ import annotations

from typing import Any

import orjson

SENDER = "Acme Billing <billing@acme.test>"
POOL_SIZE = 1024
BATCH_POOL_SIZE = 32

_HTML = (
    '<!doctype html><html><body style="font-family: sans-serif; color: #222">'
    "<h1>Thanks for your order, {name}!</h1>"
    "<p>We received your payment for order <strong>#{number}</strong>. Your receipt is below; "
    "keep it for your records. If anything looks wrong, reply to this email and a person on our "
    "support team will get back to you within one business day.</p>"
    '<table cellpadding="4" style="border-collapse: collapse">'
    "<tr><td>Plan</td><td>Team, monthly</td></tr>"
    "<tr><td>Seats</td><td>12</td></tr>"
    "<tr><td>Amount</td><td>$144.00</td></tr>"
    "<tr><td>Paid with</td><td>Visa ending in 4242</td></tr></table>"
    '<p><a href="https://acme.test/billing/receipts/{number}">View the receipt online</a> or '
    '<a href="https://acme.test/account">manage your account</a>.</p>'
    '<p style="font-size: 12px; color: #888">Acme Inc., 1 Example Street, Springfield. You get '
    "this email because you have an Acme account; receipts cannot be turned off.</p>"
    "</body></html>"
)


def email(index: int) -> dict[str, Any]:
    """One email: from, one recipient, subject, ~1 KB of HTML and a tag."""
    number = 100_000 + index
    return {
        "from": SENDER,
        "to": f"customer{index}@example.test",
        "subject": f"Your Acme receipt #{number}",
        "html": _HTML.format(name=f"Customer {index}", number=number),
        "tags": [{"name": "category", "value": "receipt"}],
    }


def single_bodies(count: int = POOL_SIZE) -> list[bytes]:
    """Encoded ``POST /emails`` bodies, each to a different recipient."""
    return [orjson.dumps(email(i)) for i in range(count)]


def batch_bodies(
    size: int, count: int = BATCH_POOL_SIZE, scheduled_at: str | None = None
) -> list[bytes]:
    """Encoded ``POST /emails/batch`` bodies of ``size`` emails each; with ``scheduled_at``
    (ISO 8601) every email is scheduled for then."""
    extra = {"scheduled_at": scheduled_at} if scheduled_at else {}
    return [orjson.dumps([email(b * size + i) | extra for i in range(size)]) for b in range(count)]
