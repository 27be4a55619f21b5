"""What ``GET /metrics`` reads from the database when scraped: emails per status, and each
queue's depth and most overdue entry. One grouped query per table, over every team (the
metrics are the machine's, not a team's)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from posthaste.storage.database import Tx
from posthaste.storage.tables import emails, jobs, webhook_deliveries

WEBHOOK_QUEUE = "webhook"


@dataclass(frozen=True)
class QueueStats:
    depth: int  # entries waiting, due or not (claimed ones included)
    oldest_due: int | None  # the earliest due time (ms) among the entries due now


async def email_status_counts(tx: Tx) -> dict[str, int]:
    """How many emails are stored in each status."""
    query = select(emails.c.status, func.count()).group_by(emails.c.status)
    return {status: count for status, count in (await tx.conn.execute(query)).all()}


async def queue_stats(tx: Tx, now: int) -> dict[str, QueueStats]:
    """Each job kind's queue, and the webhook deliveries still to attempt (``webhook``)."""
    due = func.min(jobs.c.available_at).filter(jobs.c.available_at <= now)
    query = select(jobs.c.kind, func.count(), due).group_by(jobs.c.kind)
    rows = (await tx.conn.execute(query)).all()
    stats = {kind: QueueStats(depth, oldest) for kind, depth, oldest in rows}
    pending = webhook_deliveries.c.due_at
    hooks = select(func.count(), func.min(pending).filter(pending <= now))
    depth, oldest = (await tx.conn.execute(hooks.where(pending.is_not(None)))).one()
    stats[WEBHOOK_QUEUE] = QueueStats(depth, oldest)
    return stats
