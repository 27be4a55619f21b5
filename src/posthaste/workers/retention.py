"""The ``purge`` job kind: the retention purge (``services/retention.py``), one run at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def purge(services: Services) -> Handler:
    """The handler of ``purge`` jobs: ``RetentionService.purge``."""
    return services.retention.purge
