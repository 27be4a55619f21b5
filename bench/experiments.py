"""Candidate optimisations, measured without editing ``src/``: each is a small monkeypatch
applied to the benchmarked server (``bench/serve_experiment.py``) and to the raw baseline, so
both sides of the comparison change together. None of this is how the product runs today.

- ``inline-sqlite``: aiosqlite runs each sqlite3 call directly on the event loop thread instead
  of handing it to the connection's thread and waiting for the answer (one thread round trip
  per DBAPI call; SQLAlchemy makes 3-4 of them per statement).

Measured and adopted into the product (see ``bench/README.md``): uvloop for ``serve``, an
``async def`` services dependency, remembered API keys, cached address parsing, orjson for JSON
columns, and group commit of concurrent sends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
ENV = "POSTHASTE_BENCH_EXPERIMENTS"
NAMES = ("inline-sqlite",)


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


_PATCHES: dict[str, Callable[[], None]] = {"inline-sqlite": _inline_sqlite}


def apply(names: Iterable[str]) -> None:
    """Apply the monkeypatches among ``names``."""
    for name in names:
        if name not in NAMES:
            raise ValueError(f"unknown experiment {name!r}; one of {', '.join(NAMES)}")
        patch = _PATCHES.get(name)
        if patch is not None:
            patch()


def runner(names: Iterable[str]) -> Callable[[Coroutine[Any, Any, T]], T]:
    """The event loop the baseline runs on: uvloop, like ``posthaste serve``."""
    del names
    import uvloop

    return uvloop.run
