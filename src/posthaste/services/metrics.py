"""Prometheus metrics: the counters and histograms each process keeps, and ``GET /metrics``.

What happens in a process (an email accepted, an email sent, a webhook attempt, an HTTP request,
an SMTP session) is counted in memory where it happens, with no database work. What the
database knows (emails per status, each queue's depth and its most overdue entry) is read from
it when scraped, with one grouped query per table.

Under the supervisor (``posthaste serve`` on several cores), every child writes its counts to
files in a private directory (``PROMETHEUS_MULTIPROC_DIR``, set by the supervisor for its
children only, prometheus_client's multiprocess mode); whichever API process is scraped adds up
every process's files, those of processes that have exited included, so counters never go back
when a child is restarted. A single process (``--processes 1``) counts in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from posthaste.core.destinations import SHIPPED_POLICIES, DestinationState, DestinationView
from posthaste.core.ids import now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.pools import PoolView
from posthaste.core.status import EmailStatus
from posthaste.storage import metrics as repo
from posthaste.storage.database import Database

if TYPE_CHECKING:
    from posthaste.services.destinations import DestinationQueries
    from posthaste.services.pools import PoolQueries

# prometheus_client reads this variable when it is imported (it picks the counters' storage).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNMATCHED_ROUTE = "unmatched"  # every path no route answers, as one label
# With 20 ms, the p99 a send is held to (docs/operations.md): the share answered within it is a
# bucket, not an interpolation between 10 and 25 ms.
HTTP_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0
)  # fmt: skip
DELIVERY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)


class Metrics:
    """The in-process instruments of one ``Services``: incrementing one is a dictionary lookup
    and an addition (an mmap write under the supervisor), never a query."""

    def __init__(self) -> None:
        self.multiprocess_dir = os.environ.get(MULTIPROCESS_ENV) or None
        # Under the supervisor the instruments are collected from the files, not a registry.
        self.registry = CollectorRegistry(auto_describe=True)
        register = None if self.multiprocess_dir else self.registry
        self.accepted = Counter(
            "posthaste_emails_accepted",
            "Emails accepted, by entry point and the type of their stream.",
            ["origin", "stream"],
            registry=register,
        )
        self.delivery_seconds = Histogram(
            "posthaste_delivery_seconds",
            "Seconds from an email's acceptance to its first recipient's acceptance (sent).",
            buckets=DELIVERY_BUCKETS,
            registry=register,
        )
        self.webhook_attempts = Counter(
            "posthaste_webhook_attempts",
            "Webhook delivery attempts, by outcome (success, http_error, network_error).",
            ["outcome"],
            registry=register,
        )
        self.http_request_seconds = Histogram(
            "posthaste_http_request_seconds",
            "HTTP requests, by route template and status code.",
            ["route", "status"],
            buckets=HTTP_BUCKETS,
            registry=register,
        )
        self.smtp_sessions = Counter(
            "posthaste_smtp_sessions",
            "SMTP sessions (connections), by server (relay, inbound) and outcome.",
            ["server", "outcome"],
            registry=register,
        )
        self.mta_sts_fetches = Counter(
            "posthaste_mta_sts_policy_fetches",
            "MTA-STS policy fetches, by outcome (ok, failed).",
            ["outcome"],
            registry=register,
        )
        self.mta_sts_deferrals = Counter(
            "posthaste_mta_sts_enforce_deferrals",
            "Delivery sessions deferred by an enforce MTA-STS policy (no verified TLS to an "
            "MX host it allows).",
            registry=register,
        )
        self.tls_report_uploads = Counter(
            "posthaste_tls_report_uploads",
            "TLS report uploads to https rua, by outcome (sent; retrying: failed, tried again "
            "later; failed: given up).",
            ["outcome"],
            registry=register,
        )
        # Series at 0 from the start, so that a rate() over them is defined before the first.
        for outcome in ("ok", "failed"):
            self.mta_sts_fetches.labels(outcome)
        for outcome in ("sent", "retrying", "failed"):
            self.tls_report_uploads.labels(outcome)
        # Labelled children, kept: ``labels()`` validates and locks on every call, several
        # times the cost of the increment itself.
        self._accepted: dict[tuple[str, str], Counter] = {}
        self._http: dict[tuple[str, int], Histogram] = {}

    def email_accepted(self, origin: str, stream_type: str) -> None:
        child = self._accepted.get((origin, stream_type))
        if child is None:
            child = self._accepted[origin, stream_type] = self.accepted.labels(origin, stream_type)
        child.inc()

    def email_sent(self, accepted_at_ms: int, sent_at_ms: int) -> None:
        self.delivery_seconds.observe(max(0, sent_at_ms - accepted_at_ms) / 1000)

    def webhook_attempt(self, outcome: str) -> None:
        self.webhook_attempts.labels(outcome).inc()

    def smtp_session(self, server: str, outcome: str) -> None:
        self.smtp_sessions.labels(server, outcome).inc()

    def mta_sts_fetch(self, ok: bool) -> None:
        self.mta_sts_fetches.labels("ok" if ok else "failed").inc()

    def mta_sts_deferral(self) -> None:
        self.mta_sts_deferrals.inc()

    def tls_report_upload(self, outcome: str) -> None:
        self.tls_report_uploads.labels(outcome).inc()

    def http_request(self, route: str, status: int, seconds: float) -> None:
        """One answered request (routes are templates, so the children are few)."""
        child = self._http.get((route, status))
        if child is None:
            child = self._http[route, status] = self.http_request_seconds.labels(route, status)
        child.observe(seconds)

    def exposition(self) -> bytes:
        """Every process's instruments, in the text format."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(registry)


def webhook_outcome(success: bool, status_code: int | None) -> str:
    """``success`` (2xx), ``http_error`` (any other answer), ``network_error`` (no answer)."""
    if success:
        return "success"
    return "network_error" if status_code is None else "http_error"


@dataclass(frozen=True, eq=False)  # hashed by identity, as a registry keeps its collectors
class _Families(Collector):
    """Metric families read from the database, collected once."""

    families: tuple[Metric, ...]

    def collect(self) -> Iterable[Metric]:
        return self.families


class MetricsService:
    """``GET /metrics``: the instruments of every process, and what the database knows now."""

    def __init__(
        self,
        db: Database,
        metrics: Metrics,
        destinations: DestinationQueries | None = None,
        pools: PoolQueries | None = None,
    ) -> None:
        self.db = db
        self.metrics = metrics
        self.destinations = destinations
        self.pools = pools

    async def scrape(self) -> bytes:
        now = now_ms()
        async with self.db.read() as tx:
            statuses = await repo.email_status_counts(tx)
            queues = await repo.queue_stats(tx, now)
        families = list(_database_families(statuses, queues, now))
        if self.destinations is not None:
            named = {*SHIPPED_POLICIES, *self.destinations.policies.configured}
            views = await self.destinations.list(recent=0)
            families += _destination_families(views, named, now)
        if self.pools is not None and self.pools.pools.any:
            families += _pool_families(await self.pools.list())
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(tuple(families)))
        return self.metrics.exposition() + generate_latest(registry)


def _database_families(
    statuses: dict[str, int], queues: dict[str, repo.QueueStats], now: int
) -> Iterator[Metric]:
    emails = GaugeMetricFamily(
        "posthaste_emails_total", "Emails stored now, by status.", labels=["status"]
    )
    for status in _with_known(statuses, [s.value for s in EmailStatus]):
        emails.add_metric([status], statuses.get(status, 0))
    yield emails
    depth = GaugeMetricFamily(
        "posthaste_queue_depth",
        "Entries in each queue (job kinds, and webhook deliveries to attempt), due or not.",
        labels=["kind"],
    )
    oldest = GaugeMetricFamily(
        "posthaste_queue_oldest_seconds",
        "How long the entry of each queue that has been due longest has waited (0: none due).",
        labels=["kind"],
    )
    for kind in _with_known(queues, [k.value for k in JobKind] + [repo.WEBHOOK_QUEUE]):
        stats = queues.get(kind, repo.QueueStats(0, None))
        depth.add_metric([kind], stats.depth)
        waited = 0.0 if stats.oldest_due is None else max(0, now - stats.oldest_due) / 1000
        oldest.add_metric([kind], waited)
    yield depth
    yield oldest


def _destination_families(views: list[DestinationView], named: set[str], now: int) -> list[Metric]:
    """The throttle of direct-to-MX delivery (``GET /destinations``): each destination's rate
    now, its state (one series per state, 1 for the current one) and the seconds left of its
    suspension. Destinations at their policy's full rate are left out unless a policy names
    them (``named``: Gmail, Microsoft, the configured ones): the receivers of a large list are
    many, and a series per receiver that is not being held back says nothing."""
    rate = GaugeMetricFamily(
        "posthaste_destination_rate",
        "Messages per second a destination may take now (direct-to-MX delivery).",
        labels=["destination"],
    )
    state = GaugeMetricFamily(
        "posthaste_destination_state",
        "A destination's throttle state: 1 for its current one.",
        labels=["destination", "state"],
    )
    suspended = GaugeMetricFamily(
        "posthaste_destination_suspended_seconds",
        "Seconds left of a destination's suspension after a slow-down reply (0: none).",
        labels=["destination"],
    )
    for view in views:
        if view.state == DestinationState.ACTIVE.value and view.name not in named:
            continue
        rate.add_metric([view.name], view.rate)
        for each in DestinationState:
            state.add_metric([view.name, each.value], float(each.value == view.state))
        left = 0.0 if view.suspended_until is None else max(0, view.suspended_until - now) / 1000
        suspended.add_metric([view.name], left)
    return [rate, state, suspended]


def _pool_families(views: list[PoolView]) -> list[Metric]:
    """Each source address of an IP pool: messages it took today (UTC) and its warm-up cap
    for today (no series once it has warmed up)."""
    sent = GaugeMetricFamily(
        "posthaste_pool_address_sent_today",
        "Messages a pool's source address took today, UTC (direct-to-MX delivery).",
        labels=["pool", "address"],
    )
    cap = GaugeMetricFamily(
        "posthaste_pool_address_cap_today",
        "A warming source address's cap for today, UTC (no series once warmed up).",
        labels=["pool", "address"],
    )
    for view in views:
        for address in view.addresses:
            sent.add_metric([view.name, address.address], address.sent_today)
            if address.cap is not None:
                cap.add_metric([view.name, address.address], address.cap)
    return [sent, cap]


def _with_known(found: Iterable[str], known: list[str]) -> list[str]:
    """Every known label (a zero rather than a missing series), then any other one found."""
    return known + sorted(set(found) - set(known))
