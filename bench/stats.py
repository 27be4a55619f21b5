"""What one measurement records, and the figures derived from it."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 when there are none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_figures(latencies: list[float]) -> dict[str, Any]:
    """How many, p50, p99 and max (ms) of latencies in seconds."""
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 2),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, 2),
        "max_ms": round((ordered[-1] if ordered else 0.0) * 1000, 2),
    }


@dataclass
class Recorder:
    """Collects one measurement window: request latencies, accepted emails, errors."""

    latencies: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # each request's (scheduled) start
    accepted: int = 0
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    first_start: float = math.inf
    last_end: float = 0.0

    def add(self, start: float, end: float, accepted: int, error: str | None = None) -> None:
        self.requests += 1
        self.accepted += accepted
        self.latencies.append(end - start)
        self.starts.append(start)
        self.first_start = min(self.first_start, start)
        self.last_end = max(self.last_end, end)
        if error is not None:
            self.errors[error] += 1


@dataclass
class Measurement:
    """The figures of one benchmark, as printed and written to JSON."""

    name: str
    kind: str  # "http" or "raw"
    concurrency: int
    emails_per_request: int
    seconds: float
    requests: int
    accepted_emails: int
    emails_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: dict[str, int]
    cpu: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        name: str,
        kind: str,
        recorder: Recorder,
        *,
        concurrency: int,
        emails_per_request: int,
        window_start: float | None = None,
    ) -> Measurement:
        start = recorder.first_start if window_start is None else window_start
        seconds = max(recorder.last_end - start, 1e-9) if recorder.requests else 0.0
        ordered = sorted(recorder.latencies)
        return cls(
            name=name,
            kind=kind,
            concurrency=concurrency,
            emails_per_request=emails_per_request,
            seconds=round(seconds, 3),
            requests=recorder.requests,
            accepted_emails=recorder.accepted,
            emails_per_s=recorder.accepted / seconds if seconds else 0.0,
            requests_per_s=recorder.requests / seconds if seconds else 0.0,
            p50_ms=percentile(ordered, 0.50) * 1000,
            p99_ms=percentile(ordered, 0.99) * 1000,
            max_ms=(ordered[-1] if ordered else 0.0) * 1000,
            errors=dict(recorder.errors),
        )
