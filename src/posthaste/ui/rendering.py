"""The dashboard's pages: Jinja2 templates rendered to HTML, with the headers every page gets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from posthaste.core.events import EventType
from posthaste.core.status import EmailStatus

HERE = Path(__file__).parent

# The dashboard runs its own files only: no inline script or style, no other origin. Email html
# is shown from its own route with a stricter policy still (``MESSAGE_POLICY``).
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
# A message's html, framed by its page with ``sandbox=""``: no script runs, nothing remote loads
# (remote images stay unloaded: they would tell the sender the message was read), no form posts.
MESSAGE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data: cid:; font-src data:; "
    "form-action 'none'; base-uri 'none'; frame-ancestors 'self'; sandbox"
)

ENV = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.globals["email_statuses"] = [s.value for s in EmailStatus]
ENV.globals["live_event_types"] = ",".join(
    t.value for t in EventType if t.value.startswith("email.") and t is not EventType.EMAIL_RECEIVED
)

# What a page says after a form took effect (``?notice=``): fixed texts, never echoed input.
NOTICES = {
    "verified": "The DNS records were checked just now.",
    "replayed": "The event is being delivered again; reload to see the new attempt.",
    "suppressed": "The address is suppressed: no email will be sent to it.",
    "unsuppressed": "The suppression was removed.",
    "canceled": "The email was canceled: it will not be sent.",
}


def transcript_text(lines: list[dict[str, Any]]) -> str:
    """An SMTP transcript as a mail admin reads one: ``C:`` our commands, ``S:`` the replies."""
    marks = {"command": "C:", "reply": "S:", "note": "--"}
    shown = []
    for line in lines:
        kind = next((k for k in marks if k in line), None)
        text = str(line.get(kind, "")) if kind else str(line)
        shown.append(f"{line.get('elapsed_ms', ''):>6} ms {marks.get(kind or '', '  ')} {text}")
    return "\n".join(shown)


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


ENV.filters["transcript"] = transcript_text
ENV.filters["pretty"] = pretty_json


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """The template ``name`` with what every page shows: the signed-in team and the CSRF token."""
    state = request.state
    html = ENV.get_template(name).render(
        principal=getattr(state, "principal", None),
        csrf_token=getattr(state, "csrf_token", ""),
        path=request.url.path,
        notice=NOTICES.get(request.query_params.get("notice", ""), ""),
        **context,
    )
    return HTMLResponse(html, status_code)


def secure(response: Response) -> Response:
    """The headers of every dashboard answer; a route may set its own policy first."""
    headers = response.headers
    headers.setdefault("Content-Security-Policy", PAGE_POLICY)
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Cache-Control", "no-store")
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "same-origin"
    return response


def message_html(html: str) -> HTMLResponse:
    """An email's html as its own document, under ``MESSAGE_POLICY``."""
    response = HTMLResponse(html)
    response.headers["Content-Security-Policy"] = MESSAGE_POLICY
    response.headers["X-Frame-Options"] = "SAMEORIGIN"
    return response
