"""docs/templates.md's curl example, run exactly as written against a real server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.e2e.conftest import RunningServer

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "templates.md"


def example() -> str:
    text = GUIDE.read_text()
    section = text.split("<!-- example:start -->", 1)[1].split("<!-- example:end -->", 1)[0]
    return "\n".join(re.findall(r"```bash\n(.*?)```", section, flags=re.S))


def test_the_guide_example_runs(server: RunningServer) -> None:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example()],
        env={**server.env, "POSTHASTE_URL": server.url, "POSTHASTE_KEY": server.test_key},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    created, preview, published, sent = result.stdout.splitlines()
    assert '"status":"draft"' in created and '"alias":"welcome"' in created
    assert '"html":"<p>Hi {{ first_name }}, you are on the Free plan.</p>"' in preview
    assert '"status":"published"' in published
    assert '"subject":"Welcome, Ann"' in sent
    assert '"html":"<p>Hi Ann, you are on the Free plan.</p>"' in sent
