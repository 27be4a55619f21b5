"""CPU and memory accounting from /proc: who used the cores, and how much memory a process tree
holds (Linux only)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text

from posthaste.storage.database import Database
from posthaste.storage.dialects import PostgresDialect

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSnapshot:
    wall: float
    busy_ticks: int  # machine-wide, summed over every core
    processes: dict[str, float]  # label -> CPU seconds used so far (label_sys: in the kernel)


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return []
    return stat.rpartition(")")[2].split()


def _process_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, all its threads included."""
    fields = _stat_fields(pid)
    if not fields:
        return 0.0, 0.0
    return int(fields[11]) / TICK, int(fields[12]) / TICK  # utime, stime


def process_seconds(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; 0 when it is gone."""
    user, system = _process_times(pid)
    return user + system


def postgres_pids() -> list[int]:
    """Every process named ``postgres`` on the box now."""
    return [
        int(entry.name)
        for entry in PROC.iterdir()
        if entry.name.isdigit() and _comm(entry.name) == "postgres"
    ]


def _comm(pid: int | str) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _postgres_seconds() -> float:
    """Every process named ``postgres`` on the box, plus the CPU of backends that already
    exited (the postmaster's reaped children: connections come and go under load)."""
    total = 0.0
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or _comm(entry.name) != "postgres":
            continue
        fields = _stat_fields(entry.name)
        if not fields:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
        if _comm(fields[1]) != "postgres":  # the postmaster: add its reaped children
            total += (int(fields[13]) + int(fields[14])) / TICK
    return total


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie waiting to be reaped)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant of it (children, their children, ...); [] when
    ``root`` is gone."""
    if not _stat_fields(root):
        return []
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found = [root]
    for pid in found:  # grows as it goes: breadth first
        found.extend(children.get(pid, []))
    return found


def tree_seconds(root: int) -> float:
    """CPU seconds of a process and all its descendants, the ones already reaped included (a
    master process whose workers come and go, like Postfix's ``master``; a supervisor)."""
    total = 0.0
    for pid in tree_pids(root):
        fields = _stat_fields(pid)
        if fields:  # utime, stime, and cutime, cstime: its children that exited and were reaped
            total += sum(int(value) for value in fields[11:15]) / TICK
    return total


@dataclass(frozen=True)
class Memory:
    rss: int  # bytes resident, summed over the processes (shared pages counted in each)
    pss: int  # bytes, each shared page divided among the processes sharing it

    @property
    def rss_mib(self) -> float:
        return round(self.rss / 2**20, 1)

    @property
    def pss_mib(self) -> float:
        return round(self.pss / 2**20, 1)


def _kib(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory(pids: Sequence[int]) -> Memory:
    """Resident memory of ``pids`` together: RSS summed, and PSS (``smaps_rollup``; 0 where it
    cannot be read), which counts pages that forked processes share once."""
    rss = sum(_kib(PROC / str(pid) / "status", "VmRSS:") for pid in pids)
    pss = sum(_kib(PROC / str(pid) / "smaps_rollup", "Pss:") for pid in pids)
    return Memory(rss * 1024, pss * 1024)


def tree_memory(root: int) -> tuple[Memory, int]:
    """The memory of ``root``'s process tree, and how many processes it has (``watched`` in
    bench/serve.py calls it in a process of its own)."""
    pids = tree_pids(root)
    return memory(pids), len(pids)


def _busy_ticks() -> int:
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0
    values = [int(v) for v in first[:8]]
    return sum(values) - values[3] - values[4]  # minus idle and iowait


def snapshot(
    pids: Mapping[str, Sequence[int]], trees: Mapping[str, int] | None = None
) -> CpuSnapshot:
    """CPU so far of each label's processes, and of each label's process tree in ``trees``."""
    processes: dict[str, float] = {}
    for label, group in pids.items():
        times = [_process_times(pid) for pid in group]
        processes[label] = sum(user + system for user, system in times)
        processes[f"{label}_sys"] = sum(system for _, system in times)
    for label, root in (trees or {}).items():
        processes[label] = tree_seconds(root)
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


async def during(
    pids: Mapping[str, Sequence[int]],
    start: float,
    end: float,
    trees: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """CPU use between two ``time.perf_counter()`` instants (run beside the load)."""
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    before = snapshot(pids, trees)
    await asyncio.sleep(max(0.0, end - time.perf_counter()))
    return usage(before, snapshot(pids, trees))


async def database_backends_seconds(db: Database, before: Mapping[int, float]) -> float:
    """CPU seconds the bench database's own backends used since ``before`` (pid -> seconds;
    a backend not in it counts from its start). PostgreSQL only (0 on SQLite): the statements'
    cost without other databases, the WAL writer or the checkpointer."""
    if not isinstance(db.dialect, PostgresDialect):
        return 0.0
    query = text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    async with db.read() as tx:
        pids = [int(pid) for pid in (await tx.conn.execute(query)).scalars()]
    return sum(process_seconds(pid) - before.get(pid, 0.0) for pid in pids)
