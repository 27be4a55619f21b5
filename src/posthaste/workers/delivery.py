"""The ``deliver_email`` job kind: every claimed delivery job at once, so their writes batch.

The work itself (MIME, DKIM, transport, status and events, retries) is ``services/delivery.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import BatchHandler, BatchStarter

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def deliver_emails(services: Services) -> BatchHandler:
    """The batch handler of ``deliver_email`` jobs: ``DeliveryService.deliver_many``."""
    return services.delivery.deliver_many


def start_emails(services: Services) -> BatchStarter:
    """What starts ``deliver_email`` jobs in their claim's transaction:
    ``DeliveryService.start_claimed``."""
    return services.delivery.start_claimed
