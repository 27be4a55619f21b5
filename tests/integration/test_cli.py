"""The ``posthaste`` command line, run as a user would (a real process, a real database)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posthaste.bootstrap import Services
from posthaste.config import Settings
from posthaste.core.ids import now_ms
from posthaste.storage import destinations as destinations_repo


def run_cli(
    settings: Settings, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "POSTHASTE_DATABASE_URL": settings.database_url,
        "POSTHASTE_DATA_DIR": str(settings.data_dir),
        "POSTHASTE_SECRET_KEY": settings.secret_key,
        "POSTHASTE_LOG_LEVEL": "warning",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "posthaste.cli", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_teams_and_keys(settings: Settings, services: object) -> None:
    created = run_cli(
        settings, "teams", "create", "acme", "--rate-limit", "5", "--daily-quota", "100"
    )
    assert created.returncode == 0, created.stderr
    team_id = created.stdout.strip()
    assert len(team_id) == 36
    assert run_cli(settings, "teams", "create", "acme").returncode == 1
    updated = run_cli(settings, "teams", "update", "acme", "--rate-limit", "0")
    assert updated.returncode == 0 and updated.stdout.strip() == team_id
    listing = run_cli(settings, "teams", "list").stdout
    assert "acme" in listing and "rate_limit=0/s" in listing and "daily_quota=100" in listing

    key = run_cli(
        settings,
        "keys",
        "create",
        "--team",
        "acme",
        "--mode",
        "test",
        "--permission",
        "sending_access",
        "--name",
        "ci",
    )
    assert key.returncode == 0
    token = key.stdout
    assert (
        token.startswith("ph_test_")
        and token.strip() == token.rstrip("\n")
        and len(token.strip()) == 40
    )
    keys = run_cli(settings, "keys", "list", "--team", "acme").stdout
    assert token.strip()[:12] in keys and token.strip() not in keys  # the secret is never listed
    key_id = keys.split()[0]
    assert run_cli(settings, "keys", "revoke", key_id).returncode == 0
    assert run_cli(settings, "keys", "list", "--team", "acme").stdout.strip() == ""
    assert run_cli(settings, "keys", "revoke", key_id).returncode == 1
    missing = run_cli(settings, "keys", "create", "--team", "nobody")
    assert missing.returncode == 1 and "nobody" in missing.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("POSTHASTE_HTTP_PORT", "abc"),
        ("POSTHASTE_WEBHOOK_RETRY_SCHEDULE", "1m,5x"),
        ("POSTHASTE_DELIVERY", "ftp://nope"),
        ("POSTHASTE_REGIONS", ""),
    ],
)
def test_a_bad_setting_stops_the_start_with_one_line(
    tmp_path: Path, variable: str, value: str
) -> None:
    settings = Settings(data_dir=tmp_path, secret_key="s" * 32)
    env = {variable: value} if value else {variable: ","}
    result = run_cli(settings, "serve", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0]


def test_postgres_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POSTHASTE_")}
    environ["POSTHASTE_DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/none"
    result = subprocess.run(
        [sys.executable, "-m", "posthaste.cli", "migrate"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "POSTHASTE_SECRET_KEY" in result.stderr


def test_migrate_is_idempotent(settings: Settings) -> None:
    for _ in range(2):
        result = run_cli(settings, "migrate")
        assert result.returncode == 0 and "up to date" in result.stdout


async def test_destinations_are_listed_with_their_throttle(
    settings: Settings, services: Services, tmp_path: Path
) -> None:
    now = now_ms()
    async with services.db.transaction() as tx:
        await destinations_repo.ensure(tx, "google.com", ["gmail-smtp-in.l.google.com"], 1, now)
        decision = "rate 5/s -> 2.5/s, suspended 600.0 s"
        suspension = destinations_repo.Suspension(400_000, now + 600_000, 1, 200_000)
        await destinations_repo.suspend(
            tx, "google.com", suspension, now, "421 4.7.28 slow down", decision
        )
    config = tmp_path / "posthaste.toml"
    config.write_text('[destinations."google.com"]\nrate = "300/min"\nmax_connections = 3\n')
    env = {"POSTHASTE_CONFIG": str(config)}
    listed = run_cli(settings, "destinations", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    (google,) = json.loads(listed.stdout)["data"]
    assert google["name"] == "google.com" and google["state"] == "suspended"
    assert google["rate"] == 2.5 and google["policy"]["rate"] == 5.0
    assert google["policy"]["max_connections"] == 3
    assert google["recent"][0]["reply"] == "421 4.7.28 slow down"
    text = run_cli(settings, "destinations", env=env).stdout
    assert text.startswith("google.com  suspended until ") and "421 4.7.28 slow down" in text
    config.write_text('[destinations.default]\nrate = "fast"\n')
    refused = run_cli(settings, "destinations", env=env)
    assert refused.returncode == 2 and "destinations.default.rate" in refused.stderr
