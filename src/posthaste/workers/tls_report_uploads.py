"""The ``upload_tls_report`` job kind: another try of a TLS report's failed https uploads
(``services/tls_reports.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def upload_tls_report(services: Services) -> Handler:
    """The handler of ``upload_tls_report`` jobs: ``TlsReportService.retry_uploads``."""
    return services.tls_reports.retry_uploads
