"""CPU accounting from /proc: who used the cores during a measurement (Linux only)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSnapshot:
    wall: float
    busy_ticks: int  # machine-wide, summed over every core
    processes: dict[str, float]  # label -> CPU seconds used so far


def _process_seconds(pid: int) -> float:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def _postgres_seconds() -> float:
    """Every process named ``postgres`` on the box (server backends and background workers)."""
    total = 0.0
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "postgres":
                total += _process_seconds(int(entry.name))
        except OSError:
            continue
    return total


def _busy_ticks() -> int:
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0
    values = [int(v) for v in first[:8]]
    return sum(values) - values[3] - values[4]  # minus idle and iowait


def snapshot(pids: Mapping[str, int]) -> CpuSnapshot:
    processes = {label: _process_seconds(pid) for label, pid in pids.items()}
    processes["postgres"] = _postgres_seconds()
    return CpuSnapshot(time.perf_counter(), _busy_ticks(), processes)


def usage(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """Percent of one core per label, and ``machine_pct``: percent of all cores busy."""
    wall = max(after.wall - before.wall, 1e-9)
    result = {
        f"{label}_pct": round(100 * (after.processes[label] - seconds) / wall, 1)
        for label, seconds in before.processes.items()
    }
    cores = os.cpu_count() or 1
    busy = (after.busy_ticks - before.busy_ticks) / TICK
    result["machine_pct"] = round(100 * busy / wall / cores, 1)
    return result


async def during(pids: Mapping[str, int], start: float, end: float) -> dict[str, float]:
    """CPU use between two ``time.perf_counter()`` instants (run beside the load)."""
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    before = snapshot(pids)
    await asyncio.sleep(max(0.0, end - time.perf_counter()))
    return usage(before, snapshot(pids))
