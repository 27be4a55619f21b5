"""Candidate optimisations, measured without editing ``src/``: each is a small monkeypatch
applied to the benchmarked server (``bench/serve_experiment.py``) and to the raw baseline, so
both sides of the comparison change together. None of this is how the product runs today.

- ``uvloop``: the server's event loop is uvloop instead of asyncio's default loop.
- ``async-deps``: ``posthaste.api.deps.get_services`` as an ``async def``; FastAPI runs a plain
  ``def`` dependency in a worker thread, one thread round trip per request.
- ``inline-sqlite``: aiosqlite runs each sqlite3 call directly on the event loop thread instead
  of handing it to the connection's thread and waiting for the answer (one thread round trip
  per DBAPI call; SQLAlchemy makes 3-4 of them per statement).
- ``auth-cache``: ``TeamService.authenticate`` remembers a valid key for 5 s (no read
  transaction per request; a revoked key would keep working for up to 5 s).
- ``address-cache``: ``parse_address`` memoised (LRU, 4096): a batch repeats its sender, and
  senders and recipients repeat across requests.
- ``orjson-columns``: the engine serialises JSON columns with orjson instead of ``json``.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
import typing
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from starlette.requests import Request

from posthaste.bootstrap import Services

T = TypeVar("T")
ENV = "POSTHASTE_BENCH_EXPERIMENTS"
NAMES = ("uvloop", "async-deps", "inline-sqlite", "auth-cache", "address-cache", "orjson-columns")
AUTH_TTL_SECONDS = 5.0


def _async_deps() -> None:
    import posthaste.api.deps as deps

    if "posthaste.api.routes" in sys.modules:
        raise RuntimeError("async-deps must be applied before the routes are imported")
    plain = deps.get_services

    async def get_services(request: Request) -> Services:
        return plain(request)

    # FastAPI resolves the annotations in this module's globals, hence the imports at the top.

    marker = typing.get_args(deps.ServicesDep)[1]
    object.__setattr__(marker, "dependency", get_services)


def _inline_sqlite() -> None:
    import aiosqlite
    import aiosqlite.core as core

    original_connect = aiosqlite.connect

    @functools.wraps(original_connect)
    def connect(*args: Any, **kwargs: Any) -> core.Connection:
        kwargs.setdefault("check_same_thread", False)
        return original_connect(*args, **kwargs)

    async def execute_inline(self: core.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)

    aiosqlite.connect = connect
    core.Connection._execute = execute_inline  # type: ignore[method-assign]


def _auth_cache() -> None:
    from posthaste.core.models import Principal
    from posthaste.services.teams import TeamService

    original = TeamService.authenticate
    cache: dict[str, tuple[float, Principal]] = {}

    async def authenticate(self: TeamService, token: str) -> Principal:
        now = time.monotonic()
        hit = cache.get(token)
        if hit is not None and hit[0] > now:
            return hit[1]
        principal = await original(self, token)
        cache[token] = (now + AUTH_TTL_SECONDS, principal)
        return principal

    TeamService.authenticate = authenticate  # type: ignore[method-assign]


def _address_cache() -> None:
    import posthaste.core.addresses as addresses
    import posthaste.core.send_request as send_request

    cached = functools.lru_cache(maxsize=4096)(addresses.parse_address)
    for module in (addresses, send_request):  # send_request imported the name itself
        vars(module)["parse_address"] = cached


def _orjson_columns() -> None:
    import orjson

    import posthaste.storage.database as database

    original = vars(database)["create_async_engine"]

    def create_async_engine(url: str, **options: Any) -> Any:
        options.setdefault("json_serializer", lambda value: orjson.dumps(value).decode())
        options.setdefault("json_deserializer", orjson.loads)
        return original(url, **options)

    vars(database)["create_async_engine"] = create_async_engine


_PATCHES: dict[str, Callable[[], None]] = {
    "async-deps": _async_deps,
    "inline-sqlite": _inline_sqlite,
    "auth-cache": _auth_cache,
    "address-cache": _address_cache,
    "orjson-columns": _orjson_columns,
}


def apply(names: Iterable[str]) -> None:
    """Apply the monkeypatches among ``names`` (``uvloop`` is a runner, see ``runner``)."""
    for name in names:
        if name not in NAMES:
            raise ValueError(f"unknown experiment {name!r}; one of {', '.join(NAMES)}")
        patch = _PATCHES.get(name)
        if patch is not None:
            patch()


def runner(names: Iterable[str]) -> Callable[[Coroutine[Any, Any, T]], T]:
    """``asyncio.run``, or ``uvloop.run`` under the ``uvloop`` experiment."""
    if "uvloop" in names:
        import uvloop

        return uvloop.run
    return asyncio.run
