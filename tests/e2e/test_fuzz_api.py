"""schemathesis against a real ``posthaste serve`` (SQLite and PostgreSQL): every operation of
``/openapi.json``, every check (``--checks all``: no 5xx, every answer matching its documented
status, headers, content type and schema, invalid requests refused, valid ones accepted, 405s
naming ``Allow``, no answer without the API key, nothing one team made readable with another
team's key...), bounded so that a backend takes about a minute on two cores, and PostgreSQL three
more: the coverage phase on the operations that write runs there only (``fuzz/sqlite_only.toml``).

Accepted, and nothing else: ``fuzz/schemathesis_hooks.py`` forgives a 422 that names a rule the
document can only state in words (cursors, references to the caller's records, an automation's
graph, DNS, the clock, the CSV grammar); ``fuzz/baseline.json`` would list the operations where
the document does not yet state every rule the API enforces (none: docs/reliability.md). Any
other finding fails the test with schemathesis' report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningServer

HERE = Path(__file__).parent / "fuzz"
ROOT = Path(__file__).parents[2]
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"

pytestmark = pytest.mark.skipif(not SCHEMATHESIS.exists(), reason="schemathesis not installed")


def peer_key(server: RunningServer) -> str:
    """A live key of a second team: schemathesis reads each team's records as the other."""
    cli = [sys.executable, "-m", "posthaste.cli"]
    for command in (["teams", "create", "peer"], ["keys", "create", "--team", "peer"]):
        made = subprocess.run(
            [*cli, *command], env=server.env, capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def auth_document(server: RunningServer, path: Path) -> Path:
    """The two teams as Web Fuzzing Commons users (``[auth.wfc]`` in schemathesis.toml)."""
    users = {"owner": server.live_key, "peer": peer_key(server)}
    path.write_text(
        json.dumps(
            {
                "auth": [
                    {
                        "name": name,
                        "fixedHeaders": [{"name": "Authorization", "value": f"Bearer {key}"}],
                    }
                    for name, key in users.items()
                ]
            }
        )
    )
    return path


def config_file(server: RunningServer, path: Path) -> Path:
    """The settings, with the coverage phase on the operations that write on PostgreSQL only."""
    settings = (HERE / "schemathesis.toml").read_text()
    if not postgres(server):
        settings += (HERE / "sqlite_only.toml").read_text()
    path.write_text(settings)
    return path


def postgres(server: RunningServer) -> bool:
    """Whether the server runs on PostgreSQL (the URL it was started with)."""
    return server.env.get("POSTHASTE_DATABASE_URL", "").startswith("postgresql")


def test_schemathesis_finds_nothing_new(server: RunningServer, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SCHEMATHESIS_HOOKS": "tests.e2e.fuzz.schemathesis_hooks",
        "POSTHASTE_FUZZ_USERS": str(auth_document(server, tmp_path / "users.json")),
    }
    command = [
        str(SCHEMATHESIS),
        "--no-color",
        f"--config-file={config_file(server, tmp_path / 'schemathesis.toml')}",
        "run",
        f"{server.url}/openapi.json",
        "--checks=all",
        # Examples, the coverage phase (each parameter's and body field's boundary values, then
        # the methods a path does not take; on SQLite, GET operations only), generated requests
        # per operation, then chains of calls along the document's links (create, then read,
        # edit, delete what it made); the bounds are in the files.
        "--phases=examples,coverage,fuzzing,stateful",
        "--generation-deterministic",
        "--workers=2",
        "--request-timeout=30",
        f"--baseline={HERE / 'baseline.json'}",
        f"--report-junit-path={tmp_path / 'junit.xml'}",
    ]
    run = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=2400, check=False
    )
    report = run.stdout + run.stderr
    # The figures docs/reliability.md records (shown with pytest -s).
    print(
        "\n".join(line for line in report.splitlines() if re.search(r"generated|=====.* in ", line))
    )
    assert run.returncode == 0, report
    # A run that generated next to nothing proves nothing (the run recorded in
    # docs/reliability.md generated about 2,870 cases on SQLite, 6,700 on PostgreSQL with the
    # coverage phase on the operations that write).
    generated = re.search(r"(\d+) generated", report)
    assert generated is not None and int(generated.group(1)) >= (
        5600 if postgres(server) else 2400
    ), report
    tested = re.search(r"Tested: (\d+)", report)
    assert tested is not None and int(tested.group(1)) >= 130, report
