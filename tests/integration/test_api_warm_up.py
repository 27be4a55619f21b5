"""The API's warm-up before it listens (``api.app.warm_up``): one walk of the route table, so that
the first client's request does not wait while FastAPI sets up its routers. It runs no endpoint
and no middleware: nothing is counted or logged, and the app answers as before."""

from __future__ import annotations

from posthaste.api.app import create_app, warm_up
from posthaste.bootstrap import Services
from tests.openapi_check import checked_client


async def test_the_warm_up_counts_no_request_and_the_app_answers_after_it(
    services: Services,
) -> None:
    app = create_app(services)
    await warm_up(app)
    assert _http_samples(services) == []
    async with checked_client(app) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/domains")).status_code == 401
    assert any(b'route="/domains"' in line for line in _http_samples(services))


def _http_samples(services: Services) -> list[bytes]:
    lines = services.metrics.exposition().splitlines()
    return [line for line in lines if line.startswith(b"posthaste_http_request")]
