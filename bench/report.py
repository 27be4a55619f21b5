"""The results: the machine, a table per run, the targets, and the JSON file."""

from __future__ import annotations

import asyncio
import os
import platform
import sys
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from bench import probes
from bench.server import PG_ADMIN_DSN
from bench.stats import Measurement

BATCH_TARGET = 15_000.0
SINGLE_SHARE_TARGET = 0.50
P99_TARGET_MS = 20.0


def _meminfo_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


async def _postgres_settings() -> dict[str, str]:
    try:
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
    except (OSError, asyncpg.PostgresError):
        return {}
    try:
        names = ("server_version", "fsync", "synchronous_commit", "shared_buffers")
        return {name: str(await conn.fetchval(f"SHOW {name}")) for name in names}
    finally:
        await conn.close()


def machine(loop: str) -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": _meminfo_gib(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_generator_loop": loop,
        "postgres": asyncio.run(_postgres_settings()),
        "wake_up_costs": probes.measure(PG_ADMIN_DSN),
    }


def _find(results: list[Measurement], prefix: str) -> Measurement | None:
    return next((r for r in results if r.name.startswith(prefix)), None)


def targets(results: list[Measurement]) -> list[dict[str, Any]]:
    """Each target with what was reached and whether it was met (absent parts are skipped)."""
    found: list[dict[str, Any]] = []
    raw_single = _find(results, "raw insert, 1 email/write")
    single = _find(results, "POST /emails,")
    if raw_single and single and raw_single.emails_per_s:
        share = single.emails_per_s / raw_single.emails_per_s
        found.append(
            {
                "target": "single sends >= 50 % of raw insert (1 email/tx)",
                "reached": f"{share:.0%} ({single.emails_per_s:,.0f} / "
                f"{raw_single.emails_per_s:,.0f} emails/s)",
                "met": share >= SINGLE_SHARE_TARGET,
            }
        )
    batch = _find(results, "POST /emails/batch")
    if batch:
        found.append(
            {
                "target": "batch >= 15,000 emails/s",
                "reached": f"{batch.emails_per_s:,.0f} emails/s",
                "met": batch.emails_per_s >= BATCH_TARGET,
            }
        )
    fixed = next((r for r in results if r.extra.get("is_target")), None)
    if fixed:
        sustained = bool(fixed.extra.get("sustained"))
        found.append(
            {
                "target": f"p99 <= 20 ms at {fixed.extra.get('target_rate', 0):g} req/s",
                "reached": f"p99 {fixed.p99_ms:.1f} ms, {fixed.requests_per_s:,.0f} req/s "
                f"({'sustained' if sustained else 'NOT sustained'})",
                "met": sustained and fixed.p99_ms <= P99_TARGET_MS,
            }
        )
    return found


def _cpu_cell(result: Measurement) -> str:
    cpu = result.cpu
    parts = [
        f"srv {cpu['server_pct']:.0f} (sys {cpu['server_sys_pct']:.0f})"
        if "server_pct" in cpu
        else "",
        f"pg {cpu['postgres_pct']:.0f}" if cpu.get("postgres_pct", 0) >= 1 else "",
        f"gen {cpu['bench_pct']:.0f}" if "bench_pct" in cpu else "",
        f"box {cpu['machine_pct']:.0f}" if "machine_pct" in cpu else "",
    ]
    return " / ".join(p for p in parts if p)


def table(backend: str, results: list[Measurement]) -> str:
    lines = [
        f"### {backend}",
        "",
        "| measurement | emails/s | req/s | p50 ms | p99 ms | errors | CPU % (1 core = 100) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        errors = sum(r.errors.values())
        name = r.name
        if "sustained" in r.extra:
            name += ": sustained" if r.extra["sustained"] else ": **not sustained**"
        lines.append(
            f"| {name} | {r.emails_per_s:,.0f} | {r.requests_per_s:,.0f} | {r.p50_ms:.1f} | "
            f"{r.p99_ms:.1f} | {errors} | {_cpu_cell(r)} |"
        )
    found = targets(results)
    if found:
        lines += ["", "| target | reached | met |", "|---|---|---|"]
        lines += [
            f"| {t['target']} | {t['reached']} | {'yes' if t['met'] else '**no**'} |" for t in found
        ]
    return "\n".join(lines)


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
