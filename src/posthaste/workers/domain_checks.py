"""The ``check_domain`` job kind: re-check one sending domain over DNS, one job at a time.

Each check schedules the next (or finishes its job) in the transaction that stores its outcome:
see ``DomainService.recheck`` in ``services/domains.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def check_domain(services: Services) -> Handler:
    """The handler of ``check_domain`` jobs: ``DomainService.recheck``."""
    return services.domains.recheck
