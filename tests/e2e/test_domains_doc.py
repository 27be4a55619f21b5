"""docs/domains.md's walk-through and the Resend SDK's Domains API, on a real server and DNS."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import resend

from tests.dns_server import ZoneServer, running_zone
from tests.e2e.conftest import RunningServer
from tests.e2e.docs import ROOT, bash_blocks, run_script

DOC = ROOT / "docs" / "domains.md"


@pytest.fixture(scope="module")
def dns_host() -> Iterator[ZoneServer]:
    """Stands in for the reader's DNS host."""
    yield from running_zone()


@pytest.fixture(scope="module")
def server_env(dns_host: ZoneServer) -> dict[str, str]:
    return {"POSTHASTE_DNS_NAMESERVERS": f"127.0.0.1:{dns_host.port}"}


def section(name: str) -> str:
    return bash_blocks(
        DOC, f"<!-- walkthrough:{name}:start -->", f"<!-- walkthrough:{name}:end -->"
    )


def run(script: str, server: RunningServer, env: str = "") -> str:
    return run_script(env + script, server)


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
