"""The HTTP benchmarks against a running server: single sends, batches, a fixed rate."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench import cpu, payload, profile
from bench.load import Target, Window, closed_loop, count_batch, count_single, open_loop
from bench.server import Server
from bench.stats import Measurement

SUSTAINED_SHARE = 0.98  # a fixed rate counts as sustained at >= 98 % of it, without errors


@dataclass(frozen=True)
class Plan:
    duration: float
    warmup: float
    concurrency: int = 32
    batch_size: int = 100
    batch_concurrency: int = 4
    rate: float = 500.0


def window(plan: Plan) -> Window:
    start = time.perf_counter() + plan.warmup
    return start, start + plan.duration


def _pids(server: Server) -> dict[str, list[int]]:
    return {"server": server.pids, "bench": [os.getpid()]}


def _urls(server: Server, path: str) -> list[str]:
    return [url + path for url in server.urls]


def _sampling(
    server: Server, plan: Plan, span: Window, path: Path | None
) -> asyncio.Task[None] | None:
    """py-spy on the (first) server process for the measured window, when asked for."""
    if path is None:
        return None
    return asyncio.create_task(profile.record(server.pids[0], span[0], plan.duration, path))


async def single_sends(server: Server, plan: Plan, profile_to: Path | None = None) -> Measurement:
    """Closed loop: ``plan.concurrency`` clients posting ``/emails`` back to back."""
    target = Target(_urls(server, "/emails"), server.key, payload.single_bodies(), count_single)
    span = window(plan)
    usage = asyncio.create_task(cpu.during(_pids(server), *span))
    sampling = _sampling(server, plan, span, profile_to)
    recorder = await closed_loop(target, plan.concurrency, span)
    name = f"POST /emails, {plan.concurrency} clients"
    result = Measurement.of(
        name,
        "http",
        recorder,
        concurrency=plan.concurrency,
        emails_per_request=1,
        window_start=span[0],
    )
    result.cpu = await usage
    if sampling is not None:
        await sampling
    return result


async def batches(server: Server, plan: Plan, profile_to: Path | None = None) -> Measurement:
    """Closed loop: ``plan.batch_concurrency`` clients posting ``/emails/batch`` of 100."""
    bodies = payload.batch_bodies(plan.batch_size)
    target = Target(_urls(server, "/emails/batch"), server.key, bodies, count_batch)
    span = window(plan)
    usage = asyncio.create_task(cpu.during(_pids(server), *span))
    sampling = _sampling(server, plan, span, profile_to)
    recorder = await closed_loop(target, plan.batch_concurrency, span)
    name = f"POST /emails/batch x{plan.batch_size}, {plan.batch_concurrency} clients"
    result = Measurement.of(
        name,
        "http",
        recorder,
        concurrency=plan.batch_concurrency,
        emails_per_request=plan.batch_size,
        window_start=span[0],
    )
    result.cpu = await usage
    if sampling is not None:
        await sampling
    return result


async def fixed_rate(server: Server, plan: Plan, rate: float | None = None) -> Measurement:
    """Open loop: ``/emails`` at ``rate`` (default ``plan.rate``) requests/s, latency from the
    scheduled time."""
    is_target = rate is None
    rate = plan.rate if rate is None else rate
    target = Target(_urls(server, "/emails"), server.key, payload.single_bodies(), count_single)
    span = window(plan)
    usage = asyncio.create_task(cpu.during(_pids(server), *span))
    outcome = await open_loop(target, rate, span)
    name = f"POST /emails at {rate:g} req/s (open loop)"
    result = Measurement.of(
        name,
        "http",
        outcome.recorder,
        concurrency=0,
        emails_per_request=1,
        window_start=span[0],
    )
    result.cpu = await usage
    sustained = result.requests_per_s >= SUSTAINED_SHARE * rate and not result.errors
    result.extra = {
        "is_target": is_target,
        "target_rate": rate,
        "scheduled": outcome.scheduled,
        "sustained": sustained,
        "max_dispatch_lag_ms": round(outcome.max_dispatch_lag_ms, 2),
    }
    return result


async def all_of(server: Server, plan: Plan) -> list[Measurement]:
    """Single sends, batches, the target rate, and half the single-send capacity just measured
    (the latency of a server that is not saturated)."""
    results = []
    for scenario in (single_sends, batches, fixed_rate):
        results.append(await scenario(server, plan))
        await asyncio.sleep(1)
    half = max(10.0, round(results[0].requests_per_s / 2, -1))
    results.append(await fixed_rate(server, plan, half))
    return results
