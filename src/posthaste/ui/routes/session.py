"""Signing in with an API key, and out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from posthaste.core.ids import now_ms
from posthaste.core.models import Permission
from posthaste.errors import InvalidApiKey
from posthaste.ui.auth import CheckedForm, form_text, sealer_of
from posthaste.ui.rendering import render
from posthaste.ui.routing import SIGN_IN, UiRoute
from posthaste.ui.session import (
    SESSION_COOKIE,
    SESSION_MS,
    SIGN_IN_COOKIE,
    new_sign_in_token,
    same_token,
)

router = APIRouter(prefix="/ui", route_class=UiRoute)
HOME = "/ui/emails"


@router.get("/")
@router.get("")
async def home() -> Response:
    return RedirectResponse(HOME, 303)


@router.get("/sign-in")
async def sign_in_form(request: Request, next: str = "") -> Response:
    return _form(request, 200, "", next)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    form = await request.form()
    target = form_text(form, "next")
    given = form.get("csrf_token")
    if not isinstance(given, str) or not same_token(given, request.cookies.get(SIGN_IN_COOKIE)):
        return _form(request, 403, "The sign-in form expired; please try again.", target)
    token = form_text(form, "api_key")
    services = request.app.state.services
    try:
        principal = await services.api_keys.authenticate(token) if token else None
    except InvalidApiKey:
        principal = None
    if principal is None:
        return _form(request, 401, "That API key is not valid (unknown or revoked).", target)
    if principal.key.permission is Permission.SENDING_ACCESS:
        message = (
            "This key has sending access only: it can send email but not open the dashboard. "
            "Sign in with a full access key."
        )
        return _form(request, 403, message, target)
    response = RedirectResponse(_local(target), 303)
    cookie = sealer_of(request).seal(token, now_ms())
    _set_cookie(request, response, SESSION_COOKIE, cookie, SESSION_MS // 1000)
    response.delete_cookie(SIGN_IN_COOKIE, path=SIGN_IN)
    return response


@router.post("/sign-out")
async def sign_out(_form: CheckedForm) -> Response:
    response = RedirectResponse(SIGN_IN, 303)
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response


def _form(request: Request, status: int, error: str, target: str) -> Response:
    """The sign-in form with a fresh token of its own (a session does not exist yet)."""
    token = new_sign_in_token()
    response = render(
        request, "sign_in.html", status, error=error, next=_local(target), sign_in_token=token
    )
    _set_cookie(request, response, SIGN_IN_COOKIE, token, 3600, path=SIGN_IN)
    return response


def _set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int, path: str = "/ui"
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _local(target: str) -> str:
    """Where to go after signing in: a dashboard page only (never another site)."""
    if target.startswith("/ui/") and "//" not in target and "\\" not in target:
        return target
    return HOME
