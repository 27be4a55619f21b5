"""The ``expand_broadcast`` job kind: mail a broadcast's segment, a chunk per transaction.

One job per broadcast, run on its own; a run hands the broadcast back to the queue after a
couple of seconds, so a large broadcast neither starves other jobs nor delays a worker's stop.
See ``BroadcastService.expand`` in ``services/broadcasts.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def expand_broadcast(services: Services) -> Handler:
    """The handler of ``expand_broadcast`` jobs: ``BroadcastService.expand``."""
    return services.broadcasts.expand
