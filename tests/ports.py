"""Loopback ports for servers a test starts in another process or hands to a role by number.

Asking the system for port 0 and closing the socket before the server binds it races: the
number comes from the ephemeral range (``ip_local_port_range``, 32768-60999 here), where any
outgoing connection on the machine (the suite's PostgreSQL clients, another pytest worker's
HTTP client) may take it in between; CI saw ``Address already in use`` that way. These ports
come from below that range, from a slice of its own for each pytest-xdist worker, and are
never handed out twice by one process; each is checked free before it is given.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading

_FIRST, _LAST = 20000, 32767  # below the ephemeral range


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    width = (_LAST - _FIRST + 1) // max(count, 1)
    start = _FIRST + index * width
    return range(start, start + width)


_candidates = itertools.cycle(_slice())
_lock = threading.Lock()


def free_port() -> int:
    """A loopback TCP port nothing listens on, unique to this test process."""
    with _lock:
        for port in itertools.islice(_candidates, len(_slice())):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue  # a service of the machine, or a server still closing
                return port
    raise RuntimeError("no free loopback port in this worker's slice")
