"""Webhook deliveries as a team sees them: each delivery with its event, the attempts made,
and the two changes asked through the API: replay one, and resume an endpoint's when it is
enabled again. (A delivery row is due when ``due_at <= now``; ``webhook_queue`` is how the
dispatcher claims and settles due ones.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import select, update

from posthaste.core.ids import is_uuid
from posthaste.core.webhooks import DeliveryStatus, WebhookAttempt, WebhookDelivery
from posthaste.storage.database import WEBHOOKS_CHANNEL, Tx
from posthaste.storage.keyset import cut
from posthaste.storage.tables import events, webhook_attempts, webhook_deliveries

CHANNEL = WEBHOOKS_CHANNEL
PENDING = DeliveryStatus.PENDING.value

_DELIVERY_COLUMNS = (
    webhook_deliveries.c.event_id,
    webhook_deliveries.c.webhook_id,
    events.c.type,
    events.c.created_at,
    events.c.data,
    webhook_deliveries.c.status,
    webhook_deliveries.c.attempts,
    webhook_deliveries.c.next_attempt_at,
)


def _delivery(row: Any) -> WebhookDelivery:
    status = DeliveryStatus(row.status)
    next_at = row.next_attempt_at if status is DeliveryStatus.PENDING else None
    return WebhookDelivery(
        row.event_id,
        row.webhook_id,
        row.type,
        row.created_at,
        row.data,
        status,
        row.attempts,
        next_at,
    )


def _deliveries_query(team_id: str, webhook_id: str) -> Any:
    return (
        select(*_DELIVERY_COLUMNS)
        .join(events, events.c.id == webhook_deliveries.c.event_id)
        .where(
            webhook_deliveries.c.team_id == team_id, webhook_deliveries.c.webhook_id == webhook_id
        )
    )


async def iter_deliveries(
    tx: Tx, team_id: str, webhook_id: str, page: int = 500
) -> AsyncIterator[WebhookDelivery]:
    """Every delivery of an endpoint, newest first, read in keyset pages (flat memory)."""
    before: str | None = None
    while True:
        query = _deliveries_query(team_id, webhook_id)
        if before is not None:
            query = query.where(webhook_deliveries.c.event_id < before)
        query = query.order_by(webhook_deliveries.c.event_id.desc()).limit(page)
        rows = (await tx.conn.execute(query)).all()
        for row in rows:
            yield _delivery(row)
        if len(rows) < page:
            return
        before = rows[-1].event_id


async def page_deliveries(
    tx: Tx, team_id: str, webhook_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[WebhookDelivery], bool] | None:
    """A page of an endpoint's deliveries (newest first, by event id: ids are time-ordered)
    after the event ``anchor`` (before it when ``backwards``), and whether more lie beyond;
    None when the endpoint has no such event."""
    query = _deliveries_query(team_id, webhook_id)
    event_id = webhook_deliveries.c.event_id
    if anchor is not None:
        anchor = anchor.lower()
        if not is_uuid(anchor) or await get_delivery(tx, team_id, webhook_id, anchor) is None:
            return None
        query = query.where(event_id > anchor if backwards else event_id < anchor)
    query = query.order_by(event_id.asc() if backwards else event_id.desc()).limit(limit + 1)
    rows = [_delivery(row) for row in await tx.conn.execute(query)]
    return cut(rows, limit, backwards=backwards)


async def get_delivery(
    tx: Tx, team_id: str, webhook_id: str, event_id: str
) -> WebhookDelivery | None:
    query = _deliveries_query(team_id, webhook_id).where(webhook_deliveries.c.event_id == event_id)
    row = (await tx.conn.execute(query)).first()
    return _delivery(row) if row else None


async def list_attempts(
    tx: Tx, team_id: str, webhook_id: str, event_id: str
) -> list[WebhookAttempt]:
    query = (
        select(webhook_attempts)
        .where(
            webhook_attempts.c.team_id == team_id,
            webhook_attempts.c.webhook_id == webhook_id,
            webhook_attempts.c.event_id == event_id,
        )
        .order_by(webhook_attempts.c.id)
    )
    return [
        WebhookAttempt(
            r.id,
            r.webhook_id,
            r.event_id,
            r.attempted_at,
            r.status_code,
            bool(r.success),
            r.error,
            r.duration_ms,
            r.response_body,
        )
        for r in await tx.conn.execute(query)
    ]


# --- scheduling -----------------------------------------------------------------------------


async def replay(tx: Tx, delivery: WebhookDelivery, now: int) -> None:
    """Make a delivery due now; an ended one returns to its end status if the replay fails."""
    values: dict[str, Any] = {"due_at": now, "next_attempt_at": now}
    if delivery.status is not DeliveryStatus.PENDING:
        values.update(status=PENDING, replay_status=delivery.status.value)
    query = (
        update(webhook_deliveries)
        .where(
            webhook_deliveries.c.webhook_id == delivery.webhook_id,
            webhook_deliveries.c.event_id == delivery.event_id,
        )
        .values(**values)
    )
    await tx.conn.execute(query)
    tx.notify(CHANNEL)


async def resume_paused(tx: Tx, webhook_id: str) -> None:
    """Re-enabled endpoint: its pending deliveries fall due again on their schedule."""
    query = (
        update(webhook_deliveries)
        .where(
            webhook_deliveries.c.webhook_id == webhook_id,
            webhook_deliveries.c.status == PENDING,
            webhook_deliveries.c.due_at.is_(None),
        )
        .values(due_at=webhook_deliveries.c.next_attempt_at)
    )
    await tx.conn.execute(query)
    tx.notify(CHANNEL)
