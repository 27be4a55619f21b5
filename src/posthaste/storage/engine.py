"""SQLAlchemy's async engine, without the ORM it would import beside it.

Posthaste runs Core statements on ``AsyncEngine``/``AsyncConnection`` and never an ORM session,
but the ``sqlalchemy.ext.asyncio`` package imports ``AsyncSession``, and with it the whole ORM,
whichever of its names is asked for: about 7.5 MiB of every process (the supervisor's children
are three or more; bench/README.md, issue #18). Here its ``engine`` module is imported without
running the package's ``__init__``; the package left in ``sys.modules`` runs that ``__init__``
the first time a name it has not got is asked of it, so ``from sqlalchemy.ext.asyncio import
AsyncSession`` anywhere else still works (and then loads the ORM, as it always did).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

_PACKAGE = "sqlalchemy.ext.asyncio"


def _package_without_init() -> None:
    """Put ``sqlalchemy.ext.asyncio`` in ``sys.modules`` with its ``__init__`` not yet run."""
    if _PACKAGE in sys.modules:
        return  # imported already (by a test, a tool): nothing left to save
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.loader is None:
        return  # let the import below fail as it would have
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def rest_of_package(name: str) -> Any:
        # A submodule being imported (``from . import exc``) or a probe of a dunder (inspect,
        # pytest) is not a name of the package's own: the import system goes on without it.
        if name.startswith("__") or importlib.util.find_spec(f"{_PACKAGE}.{name}") is not None:
            raise AttributeError(name)
        del package.__dict__["__getattr__"]
        loader.exec_module(package)  # the package's __init__: its engine module is loaded
        return getattr(package, name)

    package.__dict__["__getattr__"] = rest_of_package
    sys.modules[_PACKAGE] = package
    parent: ModuleType = sys.modules["sqlalchemy.ext"]
    parent.__dict__.setdefault("asyncio", package)


importlib.import_module("sqlalchemy.ext")
_package_without_init()

from sqlalchemy.ext.asyncio.engine import (  # noqa: E402
    AsyncConnection as AsyncConnection,
)
from sqlalchemy.ext.asyncio.engine import (  # noqa: E402
    AsyncEngine as AsyncEngine,
)
from sqlalchemy.ext.asyncio.engine import (  # noqa: E402
    create_async_engine as create_async_engine,
)
