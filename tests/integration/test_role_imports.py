"""What a process of each role loads: a delivery worker never the web stack or SQLAlchemy's
ORM, an API process never the ORM, neither of them asyncpg on SQLite (each is resident memory
in every process the supervisor starts; bench/README.md, issue #18). Run in fresh
interpreters, as the supervisor starts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

ROLE_MODULES = """
import asyncio, json, sys
from posthaste.bootstrap import build_services
from posthaste.config import Settings
from posthaste.server import Roles

async def main():
    services = build_services(Settings.load())
    roles = Roles(services)
    roles.start()
    await asyncio.sleep(0)  # every role's task takes its first step
    loaded = sorted(sys.modules)
    await roles.stop()
    await services.close()
    print(json.dumps(loaded))

asyncio.run(main())
"""

WEB_STACK = ("fastapi", "starlette", "uvicorn", "jinja2", "pydantic", "posthaste.api")
WEB_STACK += ("posthaste.ui",)


def _environ(data_dir: Path, role: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POSTHASTE_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(SRC), environ.get("PYTHONPATH", "")])
    environ |= {
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_ROLE": role,
        "POSTHASTE_HTTP_PORT": "0",
        "POSTHASTE_SMTP_RELAY_PORT": "0",
        "POSTHASTE_SMTP_RELAY_TLS_PORT": "0",
        "POSTHASTE_SMTP_INBOUND_PORT": "0",
    }
    return environ


def _run(code: str, environ: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def migrated(tmp_path: Path) -> Path:
    environ = _environ(tmp_path, "all")
    done = subprocess.run(
        [sys.executable, "-m", "posthaste.cli", "migrate"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return tmp_path


def _modules_of(role: str, data_dir: Path) -> set[str]:
    lines = _run(ROLE_MODULES, _environ(data_dir, role)).strip().splitlines()
    return set(json.loads(lines[-1]))


def _loaded(modules: set[str], package: str) -> bool:
    return any(name == package or name.startswith(package + ".") for name in modules)


def test_a_worker_loads_neither_the_web_stack_nor_the_orm(migrated: Path) -> None:
    modules = _modules_of("worker", migrated)
    assert "posthaste.workers.runner" in modules  # it did start the worker
    assert [p for p in WEB_STACK if _loaded(modules, p)] == []
    assert not _loaded(modules, "sqlalchemy.orm")
    assert not _loaded(modules, "lxml")  # until it first turns html into text
    assert not _loaded(modules, "asyncpg")  # on SQLite


def test_an_api_process_loads_no_orm(migrated: Path) -> None:
    modules = _modules_of("api", migrated)
    assert "fastapi" in modules
    assert not _loaded(modules, "sqlalchemy.orm")
    assert not _loaded(modules, "lxml")
    assert not _loaded(modules, "asyncpg")


def test_the_rest_of_sqlalchemy_ext_asyncio_is_there_when_asked_for() -> None:
    code = """
import sys
from posthaste.storage.engine import create_async_engine
before = "sqlalchemy.orm" in sys.modules
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine as theirs
orm = "sqlalchemy.orm" in sys.modules
print(before, theirs is create_async_engine, AsyncSession.__module__, orm)
"""
    out = _run(code, {**os.environ, "PYTHONPATH": str(SRC)}).split()
    assert out == ["False", "True", "sqlalchemy.ext.asyncio.session", "True"]
