"""Who is signed in to the dashboard, and the CSRF check of its forms."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import FormData

from posthaste.bootstrap import Services
from posthaste.core.ids import now_ms
from posthaste.core.models import Permission, Principal
from posthaste.errors import InvalidApiKey
from posthaste.ui.session import SESSION_COOKIE, SessionSealer, same_token


class SignInRequired(Exception):
    """No valid session: the page sends the browser to the sign-in form."""


class FormRefused(Exception):
    """A POST without this session's CSRF token: forged, or from an older session."""


def sealer_of(request: Request) -> SessionSealer:
    sealer: SessionSealer = request.app.state.ui_sessions
    return sealer


async def ui_principal(request: Request) -> Principal:
    """The caller of the session's key, authenticated again as the API does on every request;
    a revoked key or a ``sending_access`` key is no session."""
    session = sealer_of(request).open(request.cookies.get(SESSION_COOKIE), now_ms())
    if session is None:
        raise SignInRequired()
    services: Services = request.app.state.services
    try:
        principal = await services.api_keys.authenticate(session.api_key)
    except InvalidApiKey:
        raise SignInRequired() from None
    if principal.key.permission is Permission.SENDING_ACCESS:
        raise SignInRequired()
    request.state.principal = principal
    request.state.csrf_token = session.csrf_token
    return principal


UiPrincipal = Annotated[Principal, Depends(ui_principal)]


async def checked_form(request: Request, _principal: UiPrincipal) -> FormData:
    """The posted form, once its ``csrf_token`` matches the session's."""
    form = await request.form()
    given = form.get("csrf_token")
    if not isinstance(given, str) or not same_token(given, request.state.csrf_token):
        raise FormRefused()
    return form


CheckedForm = Annotated[FormData, Depends(checked_form)]


def form_text(form: FormData, name: str) -> str:
    """A text field of the form, trimmed; a missing or file field is empty."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""
