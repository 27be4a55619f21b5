"""docs/automations.md's walk-through, run exactly as written against a real server (whose
workers run the steps)."""

from __future__ import annotations

import json

from tests.e2e.conftest import RunningServer
from tests.e2e.docs import ROOT, bash_blocks, run_script

GUIDE = ROOT / "docs" / "automations.md"


def example() -> str:
    return bash_blocks(GUIDE, "<!-- example:start -->", "<!-- example:end -->")


def test_the_walkthrough_runs(server: RunningServer) -> None:
    env = {**server.env, "POSTHASTE_URL": server.url, "POSTHASTE_KEY": server.test_key}
    waiting, sent, completed, members = run_script(example(), server, env).splitlines()
    assert waiting == "running start welcome pause converted"
    assert json.loads(sent) == {"object": "event", "event": "trial.converted"}
    assert completed == "completed start welcome pause converted customer"
    assert members == "ann@example.com"
