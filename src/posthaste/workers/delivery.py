"""The ``deliver_email`` job kind: every claimed delivery job at once, so their writes batch.

The work itself (MIME, DKIM, transport, status and events, retries) is ``services/delivery.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import BatchHandler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def deliver_emails(services: Services) -> BatchHandler:
    """The batch handler of ``deliver_email`` jobs: ``DeliveryService.deliver_many``."""
    return services.delivery.deliver_many
