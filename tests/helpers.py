"""Small builders shared by the API and service tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select

from posthaste.storage import tables
from posthaste.storage.database import Tx

T = TypeVar("T")


def until(condition: Callable[[], T | None], what: str, seconds: float = 60) -> T:
    """``condition()``'s first truthy value, looked for every 50 ms until the deadline (for
    tests that drive a real server from outside its event loop)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def email_body(**overrides: Any) -> dict[str, Any]:
    """A valid send request; ``overrides`` replace or add fields."""
    return {
        "from": "Acme <hello@acme.test>",
        "to": "user@example.com",
        "subject": "Hello",
        "html": "<p>Hi</p>",
        **overrides,
    }


async def events_of(tx: Tx, team_id: str, event_type: str) -> list[dict[str, Any]]:
    """The ``data`` of the team's recorded events of one type, oldest first."""
    query = (
        select(tables.events.c.data)
        .where(tables.events.c.team_id == team_id, tables.events.c.type == event_type)
        .order_by(tables.events.c.created_at, tables.events.c.id)
    )
    return [row.data for row in await tx.conn.execute(query)]


def session_nice(pid: int) -> int | None:
    """The nice of the session ``pid`` leads where Linux schedules sessions as groups
    (``/proc/PID/autogroup`` reads "/autogroup-N nice K"); None on a kernel without them."""
    try:
        text = Path(f"/proc/{pid}/autogroup").read_text()
    except FileNotFoundError:
        return None
    return int(text.split(" nice ")[1])
