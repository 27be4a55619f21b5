"""Rotating the secret key (``posthaste keys rotate-secret``): the stored secrets (DKIM private
keys, webhook signing secrets) are sealed again with the new key, and what the old key signed
keeps verifying while it stays in the ring."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from posthaste.bootstrap import Services, build_services, migrate
from posthaste.config import Settings
from posthaste.core.crypto import (
    DKIM_KEY_PURPOSE,
    WEBHOOK_SECRET_PURPOSE,
    DecryptionError,
    SecretBox,
)
from posthaste.core.tracking import TrackingLinks
from posthaste.storage.tables import domains, webhooks
from tests.apps import make_app
from tests.conftest import make_tenant
from tests.integration.test_cli import run_cli

NEW = "new-secret-key-" + "n" * 40


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, webhook_allow_private=True)  # an endpoint on loopback


async def store_secrets(services: Services) -> None:
    """A domain (its DKIM key) and a webhook (its signing secret), sealed with the current key."""
    tenant = await make_tenant(services)
    transport = httpx.ASGITransport(app=make_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://posthaste.test") as http:
        domain = await http.post("/domains", json={"name": "acme.test"}, headers=tenant.headers())
        assert domain.status_code == 201, domain.text
        hook = await http.post(
            "/webhooks",
            json={"endpoint": "http://127.0.0.1:9/hook", "events": ["email.sent"]},
            headers=tenant.headers(),
        )
        assert hook.status_code in (200, 201), hook.text


async def sealed(services: Services) -> tuple[str, str]:
    async with services.db.read() as tx:
        dkim = (await tx.conn.execute(select(domains.c.dkim_private_key))).scalar_one()
        secret = (await tx.conn.execute(select(webhooks.c.secret))).scalar_one()
        return str(dkim), str(secret)


def opens_with(key: str, dkim: str, secret: str) -> bool:
    try:
        SecretBox(key, DKIM_KEY_PURPOSE).decrypt(dkim)
        SecretBox(key, WEBHOOK_SECRET_PURPOSE).decrypt(secret)
    except DecryptionError:
        return False
    return True


async def test_a_configured_key_is_rotated_with_its_previous_one(
    settings: Settings, services: Services
) -> None:
    await store_secrets(services)
    old = settings.secret_key
    refused = run_cli(settings, "keys", "rotate-secret", env={"POSTHASTE_SECRET_KEY": NEW})
    assert refused.returncode == 2 and "POSTHASTE_SECRET_KEY_PREVIOUS" in refused.stderr
    assert opens_with(old, *await sealed(services))  # refused: nothing changed

    env = {"POSTHASTE_SECRET_KEY": NEW, "POSTHASTE_SECRET_KEY_PREVIOUS": old}
    rotated = run_cli(settings, "keys", "rotate-secret", env=env)
    assert rotated.returncode == 0, rotated.stderr
    assert "1 DKIM keys, 1 webhook secrets" in rotated.stdout
    assert opens_with(NEW, *await sealed(services)) and not opens_with(old, *await sealed(services))
    again = run_cli(settings, "keys", "rotate-secret", env=env)
    assert "0 DKIM keys, 0 webhook secrets" in again.stdout  # idempotent


async def test_the_data_dir_key_is_replaced_and_stays_valid_as_previous(tmp_path: Path) -> None:
    environ = {
        "POSTHASTE_DATA_DIR": str(tmp_path),
        "POSTHASTE_DATABASE_URL": f"sqlite:///{tmp_path / 'posthaste.db'}",
        "POSTHASTE_WEBHOOK_ALLOW_PRIVATE": "true",
    }
    settings = Settings.load(environ)
    old = settings.secret_key
    assert (tmp_path / "secret.key").read_text().strip() == old
    await migrate(settings)
    services = build_services(settings)
    try:
        await store_secrets(services)
        ids = ("01a21e42-7e6e-73fd-91f2-519e476d533c", "01a21e42-7e6e-73fd-91f2-519e476d533d")
        link = TrackingLinks(settings.secret_keys, "http://posthaste.test").click_url(
            *ids, "https://example.com/"
        )
        rotated = await asyncio.to_thread(  # no POSTHASTE_SECRET_KEY: the data dir's key rotates
            subprocess.run,
            [sys.executable, "-m", "posthaste.cli", "keys", "rotate-secret"],
            env={**os.environ, **environ, "POSTHASTE_LOG_LEVEL": "warning"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert rotated.returncode == 0, rotated.stderr
        new = (tmp_path / "secret.key").read_text().strip()
        assert new != old and len(new) >= 32
        assert (tmp_path / "secret.key.previous").read_text().split() == [old]
        assert oct((tmp_path / "secret.key").stat().st_mode & 0o777) == "0o600"
        assert opens_with(new, *await sealed(services))
        # The next start reads both: the new key signs, the old one still verifies.
        reloaded = Settings.load(environ)
        assert reloaded.secret_keys == (new, old)
        token = link.rsplit("/", 1)[1]
        assert TrackingLinks(reloaded.secret_keys, "http://posthaste.test").read_click(token)
        assert TrackingLinks(new, "http://posthaste.test").read_click(token) is None
    finally:
        await services.close()
