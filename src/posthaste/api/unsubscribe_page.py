"""The unsubscribe page: a button that unsubscribes, and the person's topic choices when the
team has topics. Every value shown is HTML-escaped; the page loads nothing from elsewhere."""

from __future__ import annotations

from html import escape

from posthaste.core.unsubscribe import ONE_CLICK
from posthaste.services.unsubscribe import Preferences

# The page posts only to itself and runs no script.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STYLE = "body{font-family:sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}"


def unsubscribe_page(token: str, preferences: Preferences, notice: str | None = None) -> str:
    action = f"/unsubscribe/{escape(token)}"
    parts = [f"<h1>Email preferences for {escape(preferences.email)}</h1>"]
    if notice:
        parts.append(f"<p><strong>{escape(notice)}</strong></p>")
    if preferences.unsubscribed:
        parts.append("<p>You are unsubscribed: you will not receive these emails.</p>")
    else:
        name, value = ONE_CLICK.split("=", 1)
        parts.append(
            f'<form method="post" action="{action}">'
            f'<input type="hidden" name="{name}" value="{value}">'
            '<button type="submit">Unsubscribe from everything</button></form>'
        )
    if preferences.topics:
        parts.append(_topics_form(action, preferences))
    body = "".join(parts)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Email preferences</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


def _topics_form(action: str, preferences: Preferences) -> str:
    rows = []
    for item in preferences.topics:
        checked = " checked" if item.subscription == "opt_in" else ""
        description = item.topic.description
        about = f"<br><small>{escape(description)}</small>" if description else ""
        rows.append(
            f'<p><label><input type="checkbox" name="topic" value="{escape(item.topic.id)}"'
            f"{checked}> {escape(item.topic.name)}</label>{about}</p>"
        )
    return (
        f'<h2>Topics</h2><form method="post" action="{action}">'
        '<input type="hidden" name="action" value="topics">'
        f'{"".join(rows)}<button type="submit">Save my choices</button></form>'
    )
