"""The README's curl walk-through, run exactly as written against a real server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.e2e.conftest import RunningServer

README = Path(__file__).resolve().parents[2] / "README.md"
DEFAULT_URL = "export POSTHASTE_URL=http://127.0.0.1:8080"


def walkthrough() -> str:
    text = README.read_text()
    section = text.split("<!-- walkthrough:start -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    script = "\n".join(blocks)
    assert DEFAULT_URL in script
    return script


def test_readme_walkthrough(server: RunningServer) -> None:
    script = walkthrough().replace(DEFAULT_URL, f"export POSTHASTE_URL={server.url}")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=server.data_dir.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    assert '"status":"queued"' in out  # the send
    assert '"status":"delivered"' in out  # the get, after delivery
    assert '"next_cursor":""' in out  # the list
    assert '"type":"email.delivered"' in out  # the events
