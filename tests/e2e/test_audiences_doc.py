"""docs/audiences.md's walk-through, run exactly as written against a real server."""

from __future__ import annotations

import json

from tests.e2e.conftest import RunningServer
from tests.e2e.docs import ROOT, bash_blocks, run_script

GUIDE = ROOT / "docs" / "audiences.md"


def example() -> str:
    return bash_blocks(GUIDE, "<!-- example:start -->", "<!-- example:end -->")


def test_the_walkthrough_runs(server: RunningServer) -> None:
    env = {**server.env, "POSTHASTE_URL": server.url, "POSTHASTE_KEY": server.test_key}
    output = run_script(example(), server, env).splitlines()
    created, members, bob, ann, edited, deleted, counts, clicked, cat = output
    contact = json.loads(created)
    assert contact["email"] == "Ann@example.com" and contact["first_name"] == "Ann"
    assert contact["properties"] == {"plan": "pro", "seats": 3}
    assert members == "Ann@example.com bob@example.com"
    assert (bob, ann) == ("opt_out", "opt_in")
    changed = json.loads(edited)
    assert changed["id"] == contact["id"] and changed["unsubscribed"] is True
    assert changed["properties"] == {"plan": "pro", "seats": 5}
    gone = json.loads(deleted)
    assert gone["object"] == "contact" and gone["deleted"] is True
    assert counts == "sent 2 1 1"
    assert (clicked, cat) == ("200", "True")


def test_the_import_walkthrough_runs(server: RunningServer) -> None:
    env = {**server.env, "POSTHASTE_URL": server.url, "POSTHASTE_KEY": server.test_key}
    script = bash_blocks(GUIDE, "<!-- import:start -->", "<!-- import:end -->")
    summary, bad_address, bad_flag, members = run_script(script, server, env).splitlines()
    assert summary == "completed total=4 created=2 updated=0 skipped=0 failed=2"
    assert bad_address.startswith("4 ") and "not-an-address" in bad_address
    assert bad_flag.startswith("5 ") and "unsubscribed" in bad_flag
    assert members == "cara@example.com dan@example.com"


def test_the_broadcast_stream_walkthrough_runs(server: RunningServer) -> None:
    env = {**server.env, "POSTHASTE_URL": server.url, "POSTHASTE_KEY": server.test_key}
    script = bash_blocks(GUIDE, "<!-- stream:start -->", "<!-- stream:end -->")
    clicked, unsubscribed, newsletter, receipt = run_script(script, server, env).splitlines()
    assert (clicked, unsubscribed) == ("200", "True")
    assert (newsletter, receipt) == ("422", "200")
