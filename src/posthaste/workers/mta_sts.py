"""The ``refresh_mta_sts`` job kind: fetch a recipient domain's MTA-STS policy in the background
(``services/mta_sts.py``), so that no delivery waits on HTTPS."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def refresh_mta_sts(services: Services) -> Handler:
    """The handler of ``refresh_mta_sts`` jobs: ``PolicyRefresher.run``."""
    return services.mta_sts_refresher.run
