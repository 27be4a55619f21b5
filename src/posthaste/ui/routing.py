"""The dashboard's route class: failures become HTML pages, every answer gets the headers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from posthaste.api.errors import status_of
from posthaste.errors import PosthasteError
from posthaste.ui.auth import FormRefused, SignInRequired
from posthaste.ui.rendering import render, secure

SIGN_IN = "/ui/sign-in"
log = logging.getLogger(__name__)


class UiRoute(APIRoute):
    """A dashboard page: kept out of ``/openapi.json``, and its errors (a missing resource,
    invalid input, no session, a forged form) are answered as pages, not JSON."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs["include_in_schema"] = False
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def dashboard_handler(request: Request) -> Response:
            try:
                response = await handler(request)
            except SignInRequired:
                response = RedirectResponse(_sign_in_then(request), 303)
            except FormRefused:
                response = error_page(
                    request,
                    403,
                    "This form was not sent from your current session (a missing or stale "
                    "security token). Go back, reload the page and try again.",
                )
            except PosthasteError as exc:
                response = error_page(request, status_of(exc), exc.message)
            except RequestValidationError:
                response = error_page(request, 422, "The form or address is incomplete.")
            except Exception:
                log.exception("unhandled error on %s %s", request.method, request.url.path)
                response = error_page(request, 500, "Something went wrong on our side.")
            return secure(response)

        return dashboard_handler


def error_page(request: Request, status: int, message: str) -> Response:
    return render(request, "error.html", status, status=status, message=message)


def _sign_in_then(request: Request) -> str:
    """The sign-in form, coming back to this page afterwards (GETs only)."""
    if request.method != "GET":
        return SIGN_IN
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return f"{SIGN_IN}?next={quote(target, safe='')}"
