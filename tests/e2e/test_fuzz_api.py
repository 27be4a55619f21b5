"""schemathesis against a real ``posthaste serve`` (SQLite and PostgreSQL): every operation of
``/openapi.json``, every check (``--checks all``: no 5xx, every answer matching its documented
status, headers, content type and schema, invalid requests refused, valid ones accepted, 405s
naming ``Allow``...), bounded so that a backend takes under a minute on two cores (35 s when idle).

Accepted, and nothing else: ``fuzz/schemathesis_hooks.py`` forgives a 422 that names a rule the
document can only state in words (cursors, references to the caller's records, DNS, the clock,
the CSV grammar); ``fuzz/baseline.json`` lists the operations where the
document does not yet state every rule the API enforces (docs/reliability.md). Any other finding,
or one of those on another operation or check, fails the test with schemathesis' report.
"""

from __future__ import annotations

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


def test_schemathesis_finds_nothing_new(server: RunningServer, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SCHEMATHESIS_HOOKS": "tests.e2e.fuzz.schemathesis_hooks",
    }
    command = [
        str(SCHEMATHESIS),
        "--no-color",
        f"--config-file={HERE / 'schemathesis.toml'}",
        "run",
        f"{server.url}/openapi.json",
        "--checks=all",
        # Not "created resource not found" (ST302): schemathesis also chains operations by the
        # names of their parameters, and takes /audiences/{segment_id} (Resend's name for a
        # segment) and /segments/{segment_id} for two resources: a segment made by POST
        # /audiences and deleted by DELETE /segments/{segment_id} is then "missing"; and it
        # reads GET /domains/{domain_id}/claim, which exists only once POST .../claim made it,
        # as made by POST /domains. Both seen in CI runs, neither a defect; creates followed by
        # reads are covered by test_team_isolation.py and each resource's own tests.
        "--exclude-checks=ensure_resource_availability",
        "--header",
        f"Authorization: Bearer {server.live_key}",
        # Examples, generated requests per operation, then chains of calls along the document's
        # links (create, then read, edit, delete what it made); the bounds are in the file.
        "--phases=examples,fuzzing,stateful",
        "--generation-deterministic",
        "--workers=2",
        "--request-timeout=30",
        f"--baseline={HERE / 'baseline.json'}",
        f"--report-junit-path={tmp_path / 'junit.xml'}",
    ]
    run = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    report = run.stdout + run.stderr
    # The figures docs/reliability.md records (shown with pytest -s).
    print(
        "\n".join(line for line in report.splitlines() if re.search(r"generated|=====.* in ", line))
    )
    assert run.returncode == 0, report
    # A run that generated next to nothing proves nothing (the run recorded in
    # docs/reliability.md generated 1,671 cases per backend).
    generated = re.search(r"(\d+) generated", report)
    assert generated is not None and int(generated.group(1)) >= 1200, report
    tested = re.search(r"Tested: (\d+)", report)
    assert tested is not None and int(tested.group(1)) >= 130, report
