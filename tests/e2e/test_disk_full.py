"""SQLite on a full disk: writes answer 503 ``service_unavailable`` (never a 500), nothing is
corrupted, and the service recovers by itself once there is room again.

The full disk is the server process's file size limit (``RLIMIT_FSIZE``, set on the running
process with ``prlimit``): a write past it fails as a write to a full disk does (Python ignores
SIGXFSZ, so the write returns an error instead of killing the process).
"""

from __future__ import annotations

import asyncio
import os
import resource
import sqlite3
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import _bootstrap_keys, start_serve
from tests.ports import free_port

BODY = "x" * 200_000  # each email adds about this much to the database


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="prlimit is Linux-only")
async def test_a_full_disk_answers_503_and_recovers(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "POSTHASTE_DATA_DIR": str(data_dir),
        "POSTHASTE_HTTP_PORT": str(port),
        "POSTHASTE_SMTP_RELAY_PORT": "0",
        "POSTHASTE_SMTP_RELAY_TLS_PORT": "0",
        "POSTHASTE_SMTP_INBOUND_PORT": "0",
        "POSTHASTE_PROCESSES": "1",
        "POSTHASTE_LOG_LEVEL": "warning",
    }
    log = tmp_path / "server.log"  # outside the limit's reach: written by this process's file
    serve = await asyncio.to_thread(start_serve, env, log=log)
    server, url = serve.process, serve.url
    try:
        key = _bootstrap_keys(data_dir)["test"]
        db = data_dir / "posthaste.db"
        room = sum(p.stat().st_size for p in data_dir.glob("posthaste.db*")) + 2_000_000
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        unlimited = resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (room, hard))
        headers = {"Authorization": f"Bearer {key}"}
        body = {"from": "a@acme.test", "to": "delivered@simulator.test", "subject": "Big"}
        statuses: list[int] = []
        accepted: list[str] = []
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:

            async def send() -> int:
                response = await http.post("/emails", json={**body, "text": BODY})
                statuses.append(response.status_code)
                if response.status_code == 200:
                    accepted.append(response.json()["id"])
                else:
                    assert response.json()["name"] == "service_unavailable", response.text
                return response.status_code

            for _ in range(100):  # ~20 MB: well past the room left
                if await send() == 503:
                    break
            assert statuses[-1] == 503, statuses
            assert set(statuses) <= {200, 503}
            # Room again: the service writes again by itself, no restart.
            resource.prlimit(server.pid, resource.RLIMIT_FSIZE, unlimited)
            recovered = await _eventually_accepts(send)
            assert recovered
            for email_id in accepted:  # everything acknowledged is there and readable
                record = await http.get(f"/emails/{email_id}")
                assert record.status_code == 200 and record.json()["text"] == BODY
        await asyncio.to_thread(serve.stop)
        with sqlite3.connect(db) as check:
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            count = check.execute("SELECT count(*) FROM emails").fetchone()[0]
        assert count == len(accepted)  # nothing half-stored by the refused writes
    except BaseException:
        print(log.read_text(errors="replace"))
        raise
    finally:
        await asyncio.to_thread(serve.stop)


async def _eventually_accepts(send: object) -> bool:
    assert callable(send)
    for _ in range(200):  # each try is a real request; a few may still meet the old state
        if await send() == 200:
            return True
        await asyncio.sleep(0.05)
    return False
