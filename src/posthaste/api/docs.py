"""/docs: Swagger UI served from files installed with Posthaste, no CDN.

FastAPI's default page loads Swagger UI's script and stylesheet from a CDN, so it is blank
on a machine without internet. The ``fastapi-offline`` package ships Swagger UI's dist files
(``swagger-ui-bundle.js``, ``swagger-ui.css``) and a favicon; they are mounted under
``/docs/assets`` and the page refers to them by local paths only. ReDoc stays off.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

DOCS_URL = "/docs"
ASSETS_URL = "/docs/assets"
ASSETS = Path(str(files("fastapi_offline") / "static"))


def install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` with its assets from the installed package."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        )
