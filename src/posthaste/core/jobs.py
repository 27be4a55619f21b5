"""The kinds of job in the queue, named once: services enqueue them, workers handle them.

Each kind's handler lives in its own module under ``workers/`` and is registered in
``workers/kinds.py``; a test checks that every kind here has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class JobKind(StrEnum):
    """A job's ``kind`` column: which handler runs it."""

    DELIVER_EMAIL = "deliver_email"  # send an accepted email (workers/delivery.py)
    CHECK_DOMAIN = "check_domain"  # re-check a sending domain's DNS (workers/domain_checks.py)
    IMPORT_CONTACTS = "import_contacts"  # a contact import's CSV (workers/contact_imports.py)
    EXPAND_BROADCAST = "expand_broadcast"  # mail a broadcast's members (workers/broadcasts.py)
    AUTOMATION_STEP = (
        "automation_step"  # run the next step of an automation run (workers/automations.py)
    )
    PURGE = "purge"  # delete what is older than the retention period (workers/retention.py)
    TLS_REPORT = "tls_report"  # the daily TLS reports, RFC 8460 (workers/tls_reports.py)
    # another try of a TLS report's failed https uploads (workers/tls_report_uploads.py)
    UPLOAD_TLS_REPORT = "upload_tls_report"
    # fetch a recipient domain's MTA-STS policy, RFC 8461 (workers/mta_sts.py)
    REFRESH_MTA_STS = "refresh_mta_sts"


@dataclass(frozen=True)
class Handoff:
    """Jobs a batch made due, by kind and ref, for the worker that ran it to claim at once and
    run next, rather than queue them behind every job due before them: the deliveries of the
    emails a batch of automation steps accepted (``workers/runner.py``)."""

    kind: str
    refs: Sequence[str]
