"""``python -m bench.imports``: a contact import of ``--rows`` lines, end to end, beside a
baseline that writes the same contacts straight into the same table.

The app runs in-process (httpx's ASGI transport, no network). The figures: the upload
(``POST /contacts/imports``: the CSV read, checked whole and stored in parts with its job), the
job (every part: its contacts, ``contact.created`` events and segment memberships, one
transaction each), and the worker's peak memory growth over its resident size before the job
(``VmHWM`` reset through ``/proc/self/clear_refs``). The baseline, in a database of its own
with the same ``contacts`` table: PostgreSQL ``COPY`` (asyncpg's ``copy_records_to_table``),
SQLite one ``executemany`` INSERT; no parsing, checking, events or memberships.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy.ext.asyncio import create_async_engine

from bench import server
from posthaste.api.app import create_app
from posthaste.bootstrap import build_services, migrate
from posthaste.config import Settings
from posthaste.core.api_keys import NewApiKey
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import KeyMode
from posthaste.storage.tables import contacts, metadata, teams

HEADER = "email,first_name,last_name,unsubscribed,plan,seats:number\n"


@dataclass(frozen=True)
class Result:
    backend: str
    rows: int
    upload_s: float
    job_s: float
    job_cpu_s: float
    peak_mib: float
    baseline_s: float

    def line(self) -> str:
        total = self.upload_s + self.job_s
        return (
            f"| {self.backend} | {self.rows:,} | {self.upload_s:.2f} | {self.job_s:.2f} | "
            f"{total:.2f} | {self.rows / total:,.0f} | {self.job_cpu_s:.2f} | "
            f"{self.peak_mib:.0f} | "
            f"{self.baseline_s:.2f} | {self.rows / self.baseline_s:,.0f} |"
        )


def csv_lines(rows: int) -> Iterator[str]:
    yield HEADER
    for n in range(rows):
        unsubscribed = "true" if n % 10 == 0 else "false"
        yield f"user{n}@example{n % 97}.com,First{n},Last{n},{unsubscribed},plan{n % 5},{n % 50}\n"


def _memory(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


async def run_import(settings: Settings, rows: int) -> tuple[float, float, float, float]:
    """Upload and job seconds, the job's CPU seconds in this process, and its peak memory
    growth in MiB."""
    await migrate(settings)
    services = build_services(settings)
    try:
        team = await services.teams.create_team("bench", 0, 0)
        key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.TEST))
        headers = {"Authorization": f"Bearer {key.token}", "Content-Type": "text/csv"}
        body = "".join(csv_lines(rows)).encode()
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            segment = await client.post(
                "/segments",
                json={"name": "bench"},
                headers={"Authorization": headers["Authorization"]},
            )
            started = time.perf_counter()
            answer = await client.post(
                "/contacts/imports", content=body, params={"segment_id": segment.json()["id"]},
                headers=headers,
            )  # fmt: skip
            answer.raise_for_status()
            uploaded = time.perf_counter()
            del body
            before = _memory("VmRSS")
            _reset_peak()
            cpu = time.process_time()
            await services.make_worker().run_until_idle()
            finished = time.perf_counter()
            cpu = time.process_time() - cpu
            peak = _memory("VmHWM") - before
            done = await client.get(f"/contacts/imports/{answer.json()['id']}", headers=headers)
            record = done.json()
            assert record["status"] == "completed" and record["created"] == rows, record
        return uploaded - started, finished - uploaded, cpu, peak / 1024
    finally:
        await services.close()


async def run_baseline(url: str, rows: int) -> float:
    """Seconds to write the same contacts straight into a ``contacts`` table."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all, tables=[teams, contacts])
            team_id = new_id()
            await conn.execute(
                teams.insert().values(
                    id=team_id, name="bench", rate_limit=0, daily_quota=0, created_at=now_ms()
                )
            )
        records = list(_contact_rows(team_id, rows))
        started = time.perf_counter()
        async with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                raw: Any = (await conn.get_raw_connection()).driver_connection
                await raw.copy_records_to_table(
                    "contacts", records=records, columns=[c.name for c in contacts.columns]
                )
            else:
                names = [c.name for c in contacts.columns]
                await conn.execute(
                    contacts.insert(), [dict(zip(names, r, strict=True)) for r in records]
                )
        return time.perf_counter() - started
    finally:
        await engine.dispose()


def _contact_rows(team_id: str, rows: int) -> Iterator[tuple[Any, ...]]:
    now = now_ms()
    for n in range(rows):
        email = f"user{n}@example{n % 97}.com"
        properties = {"plan": f"plan{n % 5}", "seats": n % 50}
        yield (
            new_id(), team_id, email, email, f"First{n}", f"Last{n}", n % 10 == 0,
            orjson.dumps(properties).decode(), now, now,
        )  # fmt: skip


def _settings(backend: server.Backend) -> Settings:
    if backend.server_database_url:
        return Settings(database_url=backend.server_database_url, data_dir=backend.data_dir)
    return Settings(data_dir=backend.data_dir)


def measure(name: str, rows: int) -> Result:
    with (
        tempfile.TemporaryDirectory(prefix="posthaste-imports-") as tmp,
        server.prepared(name, Path(tmp)) as backend,
    ):
        upload, job, cpu, peak = asyncio.run(run_import(_settings(backend), rows))
        baseline = asyncio.run(run_baseline(backend.raw_async_url, rows))
    return Result(name, rows, upload, job, cpu, peak, baseline)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.imports", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    args = parser.parse_args()
    names = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    print(
        "| backend | rows | upload s | job s | total s | contacts/s | job CPU s (bench process) "
        "| job peak MiB | baseline s | baseline rows/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        for rows in args.rows:
            print(measure(name, rows).line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
