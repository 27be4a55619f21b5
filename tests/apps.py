"""The API app of a test: ``create_app(services)``, its route table set up once per test process.

FastAPI sets up each included router's routes on the first request an app routes (the request
and response models of ~170 operations: 0.8-1 s of CPU, which ``api.app.warm_up`` spends before
a server listens). A server does that once; the suite built an app per test and paid it per
test (~930 tests at about 0.5 s of CPU each, a fifth of the suite's CPU). Every app
``create_app`` builds includes the same module routers in the same way, so the app of a test
takes the routers the process's first app set up: the app, its middleware and its services are
the test's own, only the routing state is shared.

The shared routes name the first app as the provider of ``dependency_overrides``; no test
overrides a dependency (an app that did would need ``create_app`` itself).
``tests/integration/test_api_warm_up.py`` keeps building its app cold, as a server does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import FastAPI

from posthaste.api.app import create_app
from posthaste.bootstrap import Services

# id of a module router -> the first app's inclusion of it (routing state set up on first use)
_INCLUDED: dict[int, Any] = {}


def make_app(services: Services) -> FastAPI:
    """``create_app(services)`` routing through this process's already set-up routers."""
    app = create_app(services)
    routes = app.router.routes
    for index, route in enumerate(routes):
        router = getattr(route, "original_router", None)
        if router is None:
            continue
        kept = _INCLUDED.setdefault(id(router), route)
        if kept is not route and kept.original_router is router and _same(kept, route):
            routes[index] = kept
    return app


def _same(kept: Any, route: Any) -> bool:
    """Whether two inclusions of a router differ only by the app that included them."""
    return bool(
        dataclasses.replace(kept.include_context, dependency_overrides_provider=None)
        == dataclasses.replace(route.include_context, dependency_overrides_provider=None)
    )
