"""The event log: the one writer of the ``events`` table.

Every event of a team (``email.*``, ``domain.*``, later ``contact.*`` and ``suppression.*``) is
stored through ``insert_events`` inside the transaction that caused it, so whatever must happen
for each event (webhook fan-out, the live stream's wake-up) happens in that same transaction and
no event is ever lost between the change and its consequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posthaste.core.models import Event
from posthaste.storage.database import Tx
from posthaste.storage.tables import events


def event_row(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "team_id": event.team_id,
        "type": event.type,
        "email_id": event.email_id,
        "created_at": event.created_at,
        "data": event.data,
    }


async def insert_events(tx: Tx, items: Sequence[Event]) -> None:
    """Store events (one statement) in the caller's transaction."""
    if not items:
        return
    await tx.conn.execute(events.insert(), [event_row(event) for event in items])
