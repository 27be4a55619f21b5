"""The dashboard's route class on a bare app: every failure is a page, with the headers."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from posthaste.errors import Conflict, NotFound
from posthaste.ui.auth import FormRefused, SignInRequired
from posthaste.ui.routing import UiRoute


def _app() -> FastAPI:
    router = APIRouter(prefix="/ui", route_class=UiRoute)
    failures: dict[str, Exception] = {
        "missing": NotFound("Email 'x' was not found."),
        "conflict": Conflict("Only queued or scheduled emails can be canceled."),
        "anonymous": SignInRequired(),
        "forged": FormRefused(),
        "broken": RuntimeError("a bug"),
    }

    @router.get("/fail/{kind}")
    async def fail(kind: str) -> None:
        raise failures[kind]

    app = FastAPI()
    app.include_router(router)
    return app


@pytest.mark.parametrize(
    ("kind", "status", "shown"),
    [
        ("missing", 404, "Email &#39;x&#39; was not found."),
        ("conflict", 409, "Only queued or scheduled emails can be canceled."),
        ("forged", 403, "not sent from your current session"),
        ("broken", 500, "Something went wrong on our side."),
    ],
)
async def test_failures_are_pages(kind: str, status: int, shown: str) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_app()), base_url="http://ui.test"
    ) as client:
        answer = await client.get(f"/ui/fail/{kind}")
    assert answer.status_code == status
    assert answer.headers["content-type"].startswith("text/html")
    assert shown in answer.text and "a bug" not in answer.text
    assert answer.headers["x-frame-options"] == "DENY"
    assert "default-src 'none'" in answer.headers["content-security-policy"]


async def test_no_session_leads_to_the_sign_in_form_and_back() -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_app()), base_url="http://ui.test"
    ) as client:
        answer = await client.get("/ui/fail/anonymous?x=1")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/sign-in?next=%2Fui%2Ffail%2Fanonymous%3Fx%3D1"


def test_pages_are_left_out_of_the_api_document() -> None:
    assert "/ui/fail/{kind}" not in _app().openapi()["paths"]
