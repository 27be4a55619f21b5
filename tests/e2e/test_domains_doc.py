"""docs/domains.md's walk-through and the Resend SDK's Domains API, on a real server and DNS."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import resend

from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import RunningServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "domains.md"
DEFAULT_URL = "export POSTHASTE_URL=http://127.0.0.1:8080"


@pytest.fixture(scope="module")
def dns_host() -> Iterator[ZoneServer]:
    """Stands in for the reader's DNS host."""
    yield from running_zone()


@pytest.fixture(scope="module")
def server_env(dns_host: ZoneServer) -> dict[str, str]:
    return {"POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}"}


def section(name: str) -> str:
    text = DOC.read_text()
    body = text.split(f"<!-- walkthrough:{name}:start -->", 1)[1]
    body = body.split(f"<!-- walkthrough:{name}:end -->", 1)[0]
    return "\n".join(re.findall(r"```bash\n(.*?)```", body, flags=re.S))


def run(script: str, server: RunningServer, env: str = "") -> str:
    script = (env + script).replace(DEFAULT_URL, f"export POSTHASTE_URL={server.url}")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=server.data_dir.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def test_domains_walkthrough(server: RunningServer, dns_host: ZoneServer) -> None:
    added = section("add")
    out = run(added, server)
    assert '"status":"not_started"' in out
    assert "DKIM       TXT  ph" in out  # the printed table
    domain = json.loads((server.data_dir.parent / "domain.json").read_text())
    for record in domain["records"]:  # the reader publishes them at their DNS host
        if record["type"] == "TXT":
            dns_host.add(record["name"], "TXT", record["value"])
        else:
            dns_host.add(record["name"], "MX", (record["priority"], record["value"]))
    exports = "\n".join(line for line in added.splitlines() if line.startswith("export ")) + "\n"
    out = run(section("verify"), server, exports)
    assert '"status":"verified"' in out
    assert '"object":"email"' in out and '"status":"queued"' in out


def test_resend_sdk_manages_domains(server: RunningServer, dns_host: ZoneServer) -> None:
    previous = (resend.api_key, resend.api_url)
    resend.api_key, resend.api_url = server.live_key, server.url
    try:
        created = resend.Domains.create({"name": "sdk.test", "region": "eu-west-1"})
        assert created["status"] == "not_started" and created["region"] == "eu-west-1"
        for record in created["records"]:
            if record["type"] == "TXT":
                dns_host.add(record["name"], "TXT", record["value"])
            else:
                dns_host.add(record["name"], "MX", (record["priority"], record["value"]))
        resend.Domains.verify(created["id"])
        assert resend.Domains.get(created["id"])["status"] == "verified"
        updated = resend.Domains.update({"id": created["id"], "open_tracking": True})
        assert updated["open_tracking"] is True
        listed = resend.Domains.list()["data"]
        assert created["id"] in {d["id"] for d in listed}
        sent = resend.Emails.send(
            {"from": "hi@sdk.test", "to": ["delivered@simulator.test"], "subject": "s", "text": "t"}
        )
        assert sent["id"]
        assert resend.Domains.remove(created["id"])["deleted"] is True
    finally:
        resend.api_key, resend.api_url = previous
