"""The README's curl walk-through, run exactly as written against a real server."""

from __future__ import annotations

from tests.e2e.conftest import RunningServer
from tests.e2e.docs import DEFAULT_URL, ROOT, bash_blocks, run_script

README = ROOT / "README.md"


def walkthrough() -> str:
    script = bash_blocks(README, "<!-- walkthrough:start -->", "<!-- walkthrough:end -->")
    assert DEFAULT_URL in script
    return script


def test_readme_walkthrough(server: RunningServer) -> None:
    out = run_script(walkthrough(), server)
    assert '"status":"queued"' in out  # the send
    assert '"status":"delivered"' in out  # the get, after delivery
    assert '"next_cursor":""' in out  # the list
    assert '"type":"email.delivered"' in out  # the events
