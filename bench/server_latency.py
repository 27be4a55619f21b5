"""The server's own view of a paced load's latency, beside the client's.

On a 2-core box shared by the load generator, the sink, PostgreSQL and the server, a latency
measured by the client from the scheduled send time (as ``bench/load.py`` does, rightly: no
coordinated omission) also holds the time the load generator itself waited for a core before
sending, and before reading the answer. The server times every request itself
(``posthaste_http_request_seconds``, from the request's arrival in the application to its
answer; ``GET /metrics``, open to loopback peers): the difference of two scrapes, one when the
measured window starts and one after its last answer, gives how many of the window's requests
the server answered within each bucket's bound. Bucket bounds are coarse (10, 20, 25, 50, 100 ms,
...), so what is reported is the share answered within each bound, and the smallest bound
within which 99 % were.
"""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

METRIC = "posthaste_http_request_seconds"

Buckets = dict[float, float]  # upper bound (seconds) -> requests answered within it


async def scrape(base_url: str, route: str, status: str = "200") -> Buckets:
    """The cumulative bucket counts of ``route`` answered with ``status``, summed over the
    server's processes (its ``/metrics`` sums them)."""
    async with aiohttp.ClientSession() as session, session.get(base_url + "/metrics") as resp:
        resp.raise_for_status()
        text = await resp.text()
    found: Buckets = {}
    for family in text_string_to_metric_families(text):
        if family.name != METRIC:
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name != METRIC + "_bucket" or labels.get("route") != route:
                continue
            if labels.get("status") != status:
                continue
            bound = float(labels["le"])
            found[bound] = found.get(bound, 0.0) + sample.value
    return found


def summary(before: Buckets, after: Buckets) -> dict[str, object]:
    """The window's requests (``after`` less ``before``): the share answered within each
    bound, and the smallest bound within which 99 % were (None when no request was seen)."""
    window = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    total = window.get(float("inf"), 0.0)
    if total <= 0:
        return {"requests": 0, "within_ms": {}, "p99_within_ms": None}
    within = {  # by the bound in ms, as text (a JSON key)
        f"{_ms(bound):g}": round(count / total, 4)
        for bound, count in window.items()
        if bound != float("inf")
    }
    p99 = next((bound for bound, count in window.items() if count >= 0.99 * total), None)
    return {
        "requests": int(total),
        "within_ms": within,
        "p99_within_ms": None if p99 is None or p99 == float("inf") else _ms(p99),
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
