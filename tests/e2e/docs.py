"""Running the shell examples of the docs exactly as written, against a real server."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.e2e.conftest import RunningServer

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_URL = "export POSTHASTE_URL=http://127.0.0.1:8080"


def bash_blocks(path: Path, start: str, end: str) -> str:
    """The ```bash blocks between the ``start`` and ``end`` markers of ``path``, joined."""
    section = path.read_text().split(start, 1)[1].split(end, 1)[0]
    return "\n".join(re.findall(r"```bash\n(.*?)```", section, flags=re.S))


def run_script(script: str, server: RunningServer, env: Mapping[str, str] | None = None) -> str:
    """Run ``script`` with bash -euo pipefail beside the server's data dir; its stdout.

    The docs' ``export POSTHASTE_URL=http://127.0.0.1:8080`` is pointed at the test server.
    """
    script = script.replace(DEFAULT_URL, f"export POSTHASTE_URL={server.url}")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=server.data_dir.parent,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout
