"""docs/templates.md's curl example, run exactly as written against a real server."""

from __future__ import annotations

from tests.e2e.conftest import RunningServer
from tests.e2e.docs import ROOT, bash_blocks, run_script

GUIDE = ROOT / "docs" / "templates.md"


def example() -> str:
    return bash_blocks(GUIDE, "<!-- example:start -->", "<!-- example:end -->")


def test_the_guide_example_runs(server: RunningServer) -> None:
    env = {**server.env, "POSTHASTE_URL": server.url, "POSTHASTE_KEY": server.test_key}
    created, preview, published, sent = run_script(example(), server, env).splitlines()
    assert '"status":"draft"' in created and '"alias":"welcome"' in created
    assert '"html":"<p>Hi {{ first_name }}, you are on the Free plan.</p>"' in preview
    assert '"status":"published"' in published
    assert '"subject":"Welcome, Ann"' in sent
    assert '"html":"<p>Hi Ann, you are on the Free plan.</p>"' in sent
