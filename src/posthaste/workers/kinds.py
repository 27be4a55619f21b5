"""Every job kind and how to build its handler, in one table that ``Services.make_worker`` reads.

A kind runs one job at a time (``OneByOne``) or every claimed job of the kind at once
(``Batched``, so their database writes share statements); a batched kind may start its jobs in
the claim's own transaction (``start``: deliveries). The webhook dispatcher
(``workers/webhooks.py``) is its own loop over its own queue, not a job kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from posthaste.core.jobs import JobKind
from posthaste.workers import (
    automations,
    broadcasts,
    contact_imports,
    delivery,
    domain_checks,
    mta_sts,
    retention,
    tls_report_uploads,
    tls_reports,
)
from posthaste.workers.runner import BatchHandler, BatchStarter, Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


@dataclass(frozen=True)
class OneByOne:
    """A kind whose jobs run each on its own."""

    build: Callable[[Services], Handler]


@dataclass(frozen=True)
class Batched:
    """A kind whose claimed jobs run together, in one call; ``start`` builds what starts
    them in the claim's transaction (``workers/runner.BatchStarter``), if the kind has one;
    ``claim``, how many a claim takes at most, if not the runner's batch size (a wide lane:
    ``workers/runner.py``)."""

    build: Callable[[Services], BatchHandler]
    start: Callable[[Services], BatchStarter] | None = None
    claim: Callable[[Services], int] | None = None


JOB_KINDS: Mapping[JobKind, OneByOne | Batched] = MappingProxyType(
    {
        JobKind.DELIVER_EMAIL: Batched(delivery.deliver_emails, delivery.start_emails),
        JobKind.CHECK_DOMAIN: OneByOne(domain_checks.check_domain),
        JobKind.IMPORT_CONTACTS: OneByOne(contact_imports.import_contacts),
        JobKind.EXPAND_BROADCAST: OneByOne(broadcasts.expand_broadcast),
        JobKind.AUTOMATION_STEP: Batched(
            automations.run_automation_steps, claim=automations.steps_a_claim
        ),
        JobKind.PURGE: OneByOne(retention.purge),
        JobKind.TLS_REPORT: OneByOne(tls_reports.tls_report),
        JobKind.UPLOAD_TLS_REPORT: OneByOne(tls_report_uploads.upload_tls_report),
        JobKind.REFRESH_MTA_STS: OneByOne(mta_sts.refresh_mta_sts),
    }
)


# Kinds that fill the queue in bulk: while one runs, its worker keeps one other batch beside it
# (``workers/runner.Worker._slots``), so a broadcast is accepted at its own speed rather than
# at what delivering its first emails leaves it.
FIRST_KINDS = frozenset({JobKind.EXPAND_BROADCAST.value})


@dataclass(frozen=True)
class Handlers:
    """The handlers of every job kind, built for one ``Services``, as the runner takes them."""

    one_by_one: dict[str, Handler]
    batched: dict[str, BatchHandler]
    starters: dict[str, BatchStarter]
    lanes: dict[str, int]  # the kinds claimed by a number of their own


def build_handlers(services: Services) -> Handlers:
    """Each kind's handler in ``JOB_KINDS``, built from ``services``."""
    handlers = Handlers(one_by_one={}, batched={}, starters={}, lanes={})
    for kind, entry in JOB_KINDS.items():
        if isinstance(entry, Batched):
            handlers.batched[kind] = entry.build(services)
            if entry.start is not None:
                handlers.starters[kind] = entry.start(services)
            if entry.claim is not None:
                handlers.lanes[kind] = entry.claim(services)
        else:
            handlers.one_by_one[kind] = entry.build(services)
    return handlers
