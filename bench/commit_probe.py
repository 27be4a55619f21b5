"""``python -m bench.commit_probe``: what a bare durable commit takes on the box, right now.

The baseline beside a paced row (``bench.serve``, ``bench.purge``, ``bench.broadcast_serve``):
a bare asyncpg client, in a process and a session of its own (as ``posthaste serve``'s front
process is: Linux shares the CPU between sessions first), commits one small row at a time, on
a fixed schedule (open loop: latency from the scheduled time, so its own lateness counts as the
load generator's does), into a database of the same PostgreSQL cluster. That is the path every
accepted lone send waits for, a backend given a core and the WAL flushed to disk, without
anything of Posthaste's: when its p99 is over a paced target, no server that has stored an
email before it answers can meet that target on the box at that moment.

    python -m bench.commit_probe --dsn postgresql://... [--rate 100] [--until PERF_COUNTER]

Runs until ``--until`` (a ``time.perf_counter()`` reading: CLOCK_MONOTONIC, the same in every
process), SIGTERM or the end of its standard input, and prints each commit's scheduled time
and latency as JSON; the benchmark that started it (``Running``) splits them by its phases.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import signal
import subprocess
import sys
import time
from typing import Any

import asyncpg
import orjson
import uvloop

from bench.stats import latency_figures

TABLE = "bench_commit_probe"
PAYLOAD = "x" * 200  # about one small email's row
RATE = 100.0  # commits a second beside a paced row: a few % of a core, 1,000 in 10 s


async def probe(dsn: str, rate: float, until: float) -> list[tuple[float, float]]:
    """Commits at ``rate``/s until ``until`` (``time.perf_counter()``: CLOCK_MONOTONIC, one
    clock for every process of the box), SIGTERM or the end of standard input; each commit's
    scheduled time and latency."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # Its standard input is a pipe from the benchmark: at its end (closed, or the benchmark
    # gone, whatever stopped it) the probe stops too, never left running.
    await loop.connect_read_pipe(lambda: _Watching(stop), sys.stdin)
    conn = await asyncpg.connect(dsn, timeout=10)
    samples: list[tuple[float, float]] = []
    try:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial, body text)")
        insert = await conn.prepare(f"INSERT INTO {TABLE} (body) VALUES ($1)")
        begin = time.perf_counter()
        for index in itertools.count():
            scheduled = begin + index / rate
            if scheduled >= until or stop.is_set():
                break
            delay = scheduled - time.perf_counter()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                    break
            await insert.fetch(PAYLOAD)
            samples.append((scheduled, time.perf_counter() - scheduled))
    finally:
        await conn.close()
    return samples


class _Watching(asyncio.Protocol):
    """Sets ``stop`` when the pipe it reads ends."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop.set()


def summary(latencies: list[float]) -> dict[str, Any]:
    """``stats.latency_figures`` and the share within each paced target, of latencies in
    seconds."""
    if not latencies:
        return {"requests": 0}
    return {
        **latency_figures(latencies),
        "within_20_ms": _share(latencies, 0.020),
        "within_50_ms": _share(latencies, 0.050),
    }


def _share(latencies: list[float], bound: float) -> float:
    return round(sum(1 for value in latencies if value <= bound) / len(latencies), 4)


class Running:
    """The probe in a process and a session of its own, from now on."""

    def __init__(self, dsn: str, rate: float, until: float) -> None:
        command = [sys.executable, "-m", "bench.commit_probe", "--dsn", dsn]
        command += ["--rate", str(rate), "--until", str(until)]
        self.rate = rate
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    async def samples(self) -> list[tuple[float, float]]:
        """Stops it (if it still runs: ``communicate`` closes its standard input) and returns
        its (scheduled time, latency) pairs."""
        out, err = await asyncio.to_thread(self._process.communicate)
        if self._process.returncode != 0:
            raise RuntimeError(f"bench.commit_probe failed: {err.decode(errors='replace')}")
        return [(at, latency) for at, latency in orjson.loads(out)]

    async def between(self, start: float, end: float = math.inf) -> dict[str, Any]:
        """Stops it; the figures of the commits scheduled from ``start`` until ``end``."""
        samples = await self.samples()
        figures = summary([latency for at, latency in samples if start <= at < end])
        return {**figures, "rate": self.rate}


def beside(dsn: str, until: float = math.inf, rate: float = RATE) -> Running | None:
    """The probe started now, until ``until`` or stopped (None without PostgreSQL)."""
    return Running(dsn, rate, until) if dsn else None


def p99(figures: dict[str, Any] | None) -> str:
    """A table cell: the probe's p99 and share within 20 ms ("-" when it did not run)."""
    if not figures or not figures.get("requests"):
        return "-"
    return f"{figures['p99_ms']} ms ({figures['within_20_ms']:.1%} within 20 ms)"


def line(figures: dict[str, Any] | None) -> str:
    """The probe's figures for a table's cell (empty when it did not run)."""
    if not figures or not figures.get("requests"):
        return ""
    return (
        f"; a bare commit beside it (`bench.commit_probe`, {figures['requests']} at"
        f" {figures['rate']:g}/s): p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms,"
        f" max {figures['max_ms']} ms, {figures['within_20_ms']:.1%} within 20 ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rate", type=float, default=RATE)
    parser.add_argument("--until", type=float, default=math.inf, help="perf_counter time")
    args = parser.parse_args(argv)
    samples = uvloop.run(probe(args.dsn, args.rate, args.until))
    sys.stdout.write(orjson.dumps(samples).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
