"""The ``tls_report`` job kind: the daily TLS reports (``services/tls_reports.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def tls_report(services: Services) -> Handler:
    """The handler of ``tls_report`` jobs: ``TlsReportService.run``."""
    return services.tls_reports.run
