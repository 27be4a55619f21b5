"""/docs works without internet: every asset it refers to is served by Posthaste itself."""

from __future__ import annotations

import re

import httpx

from posthaste.bootstrap import Services
from tests.apps import make_app

ASSET_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


async def test_docs_refers_only_to_local_assets_that_are_served(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle" in page.text
    assert not re.search(r"(?:src|href)=[\"']?(?:https?:)?//", page.text), page.text
    assert "cdn" not in page.text.lower()
    assets = re.findall(r"(?:src|href)=\"([^\"]+)\"", page.text)
    assert len(assets) == 3, assets  # the script, the stylesheet, the favicon
    for url in assets:
        assert url.startswith("/docs/assets/"), url
        answer = await client.get(url)
        assert answer.status_code == 200, url
        kind = next(kind for ext, kind in ASSET_TYPES.items() if url.endswith(ext))
        assert kind in answer.headers["content-type"], (url, answer.headers["content-type"])
        assert len(answer.content) > 0
    spec = re.search(r"url: '([^']+)'", page.text)
    assert spec is not None and spec.group(1) == "/openapi.json"
    assert (await client.get(spec.group(1))).status_code == 200


async def test_docs_assets_unknown_file_is_404(client: httpx.AsyncClient) -> None:
    answer = await client.get("/docs/assets/nothing.js")
    assert answer.status_code == 404


async def test_redoc_is_off(client: httpx.AsyncClient) -> None:
    assert (await client.get("/redoc")).status_code == 404


async def test_the_document_says_which_operations_take_no_key(
    services: Services, client: httpx.AsyncClient
) -> None:
    """Every operation marked ``security: []`` is answered without a key, and every other one
    is refused without a key: the document states what the API enforces."""
    document = (await client.get("/openapi.json")).json()
    public = []
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=make_app(services)), base_url="http://posthaste.test"
    ) as bare:  # no answer check: the point is the status of requests without a key
        for path, operations in document["paths"].items():
            url = re.sub(r"\{[^}]+\}", "x", path)
            for method, operation in operations.items():
                answer = await bare.request(method.upper(), url)
                if operation.get("security") == []:
                    public.append(f"{method.upper()} {path}")
                    assert answer.status_code != 401, (method, path)
                else:
                    assert answer.status_code == 401, (method, path, answer.status_code)
                    assert answer.json()["name"] == "missing_api_key", (method, path)
    assert {"GET /healthz", "GET /readyz", "GET /t/o/{token}", "POST /unsubscribe/{token}"} <= set(
        public
    )


async def test_a_method_not_allowed_names_the_methods_that_are(
    services: Services, client: httpx.AsyncClient
) -> None:
    """RFC 9110: a 405 carries ``Allow``, listing every method the path answers, also where a
    route per method serves the path (``GET /emails`` and ``POST /emails``); it equals what the
    document says of the path."""
    document = (await client.get("/openapi.json")).json()
    templates = {
        re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"): (
            path.count("{"),
            set(ops),
        )
        for path, ops in document["paths"].items()
    }
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=make_app(services)), base_url="http://posthaste.test"
    ) as bare:
        checked = 0
        for path in document["paths"]:
            url = re.sub(r"\{[^}]+\}", "x", path)
            matching = [shape for regex, shape in templates.items() if regex.match(url)]
            # The most specific path's resource: /contacts/imports is not a contact "imports"
            # (though DELETE /contacts/imports reaches DELETE /contacts/{id}, a 404).
            fewest = min(params for params, _ in matching)
            documented = set().union(*(ops for params, ops in matching if params == fewest))
            answered = set().union(*(ops for _, ops in matching))
            refused = sorted({"get", "post", "put", "patch", "delete"} - answered)
            if not refused:
                continue
            answer = await bare.request(refused[0].upper(), url)
            assert answer.status_code == 405, (refused[0], url, answer.text)
            assert answer.json()["name"] == "method_not_allowed"
            allowed = {method.strip().lower() for method in answer.headers["allow"].split(",")}
            assert allowed == documented, (url, answer.headers["allow"])
            checked += 1
    assert checked > 40
