"""The README's curl walk-through, run exactly as written against a real server."""

from __future__ import annotations

import resend

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


def test_readme_python_sdk_example(server: RunningServer) -> None:
    """The README's Resend Python SDK example, with this server's key and address."""
    text = README.read_text()
    start = text.index("```python\n", text.index("With Resend's SDKs")) + len("```python\n")
    snippet = text[start : text.index("```", start)]
    assert 'resend.api_url = "http://127.0.0.1:8080"' in snippet
    previous = (resend.api_key, resend.api_url)
    try:
        exec(  # the README's own example
            snippet.replace("ph_test_...", server.test_key).replace(
                "http://127.0.0.1:8080", server.url
            ),
            {},
        )
        assert resend.api_url == server.url
        listed = resend.Emails.list({"limit": 1})
        assert listed["data"][0]["subject"] == "Hi"
    finally:
        resend.api_key, resend.api_url = previous
