"""``python -m bench.request_copies``: how many copies of its body one large request holds.

In-process (no server): the API app of ``posthaste.api.app`` over SQLite (or ``--backend
postgres``) takes one ``POST /emails`` with an attachment, one ``POST /emails/batch`` of two
(half the size each), and the relay one message with the attachment over SMTP (from a client
in another process), while ``tracemalloc`` traces the process's Python allocations. The body
reaches the app in 64 KiB chunks, as uvicorn hands it over. Reported per request: the body's
size, the peak of traced memory above what was traced before the request, and that peak as a
multiple of the body (the copies held at once).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import subprocess
import sys
import tempfile
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import orjson

from bench import server
from posthaste.api.app import create_app
from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.models import KeyMode
from posthaste.smtp.relay import Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from posthaste.storage.dialects import PostgresDialect, SqliteDialect
from posthaste.storage.migrate import upgrade_to_head

MIB = 1024 * 1024
CHUNK = 64 * 1024


def email_body(attachment: int, count: int = 1) -> dict[str, object]:
    content = base64.b64encode(os.urandom(attachment)).decode()
    return {
        "from": "bench@acme.test",
        "to": "delivered@simulator.test",
        "subject": "Large",
        "text": "attached",
        "attachments": [{"filename": f"big{i}.bin", "content": content} for i in range(count)],
    }


async def chunks(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), CHUNK):
        yield body[start : start + CHUNK]


async def traced_peak(action: Callable[[], Awaitable[object]]) -> int:
    """Peak traced bytes above the start while ``action`` runs."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    await action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak - base


async def measure(services: Services, megabytes: float) -> list[tuple[str, int, int]]:
    team = await services.teams.create_team(f"bench-{uuid.uuid4().hex[:8]}", 0, 0)
    key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.TEST))
    headers = {"Authorization": f"Bearer {key.token}", "Content-Type": "application/json"}
    size = int(megabytes * MIB)
    rows = []
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=300) as http:
        await http.post("/emails", content=orjson.dumps(email_body(1000)), headers=headers)
        for path, body in (
            ("/emails", orjson.dumps(email_body(size))),
            ("/emails/batch", orjson.dumps([email_body(size // 2), email_body(size // 2)])),
        ):
            sized = {**headers, "Content-Length": str(len(body))}

            async def post(
                path: str = path, body: bytes = body, sized: dict[str, str] = sized
            ) -> None:
                answer = await http.post(path, content=chunks(body), headers=sized)
                assert answer.status_code == 200, answer.text

            rows.append((f"POST {path}", len(body), await traced_peak(post)))
        rows.append(await relay_row(services, key.token, size))
    return rows


# The client runs in its own process: smtplib's copies of the message are not the relay's.
CLIENT = """
import email.message, email.policy, os, smtplib, ssl, sys
port, cafile, key, size = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
message = email.message.EmailMessage()
message["From"], message["To"] = "bench@acme.test", "delivered@simulator.test"
message["Subject"] = "Large"
message.set_content("attached")
message.add_attachment(os.urandom(size), maintype="application", subtype="octet-stream",
                       filename="big.bin")
raw = message.as_bytes(policy=email.policy.SMTP)
with smtplib.SMTP("127.0.0.1", port, timeout=300) as client:
    client.starttls(context=ssl.create_default_context(cafile=cafile))
    client.login("posthaste", key)
    client.sendmail("bench@acme.test", ["delivered@simulator.test"], raw)
print(len(raw))
"""


async def relay_row(services: Services, key: str, size: int) -> tuple[str, int, int]:
    """One message of the same attachment through the relay's DATA (STARTTLS, AUTH)."""
    relay = RelayServer(services, "127.0.0.1", [Listener(0, False)])
    await relay.start()
    try:
        cafile = str(services.settings.data_dir / CERT_FILENAME)
        command = [sys.executable, "-c", CLIENT, str(relay.ports[0]), cafile, key, str(size)]
        sent: list[int] = []

        async def submit() -> None:
            done = await asyncio.to_thread(subprocess.run, command, capture_output=True, check=True)
            sent.append(int(done.stdout))

        peak = await traced_peak(submit)
    finally:
        await relay.close()
    return "relay DATA", sent[0], peak


async def run(backend: server.Backend, megabytes: float) -> list[tuple[str, int, int]]:
    url = backend.server_database_url or f"sqlite:///{backend.data_dir / 'posthaste.db'}"
    backend.data_dir.mkdir(parents=True, exist_ok=True)
    dialect = SqliteDialect() if backend.name == "sqlite" else PostgresDialect()
    await upgrade_to_head(async_url(url), dialect)
    services = build_services(Settings(database_url=url, data_dir=backend.data_dir))
    try:
        return await measure(services, megabytes)
    finally:
        await services.close()


def async_url(url: str) -> str:
    if url.startswith("sqlite:"):
        return url.replace("sqlite:", "sqlite+aiosqlite:", 1)
    return url.replace("postgresql://", "postgresql+asyncpg://", 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--mib", type=float, default=6, help="attachment size, MiB")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as workdir,
        server.prepared(args.backend, Path(workdir)) as backend,
    ):
        rows = asyncio.run(run(backend, args.mib))
    print("| request | body | peak traced above start | copies of the body |")
    print("|---|---:|---:|---:|")
    for name, body, peak in rows:
        print(f"| {name} | {body / MIB:.1f} MiB | {peak / MIB:.1f} MiB | {peak / body:.2f} |")


if __name__ == "__main__":
    main()
