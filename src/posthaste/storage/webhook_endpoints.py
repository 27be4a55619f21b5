"""Webhook endpoints: the ``webhooks`` rows a team creates, changes and deletes, and the
``Target`` view of one the dispatcher posts to. Secrets are stored as SecretBox text.

Their deliveries are elsewhere: made from events in ``webhook_fanout``, shown and replayed in
``webhook_deliveries``, claimed and settled by the dispatcher in ``webhook_queue``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update

from posthaste.core.webhook_requests import WebhookChanges
from posthaste.core.webhooks import Webhook
from posthaste.storage.database import Tx
from posthaste.storage.dialects import among
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import webhooks


@dataclass(frozen=True)
class Target:
    """What the dispatcher needs of an endpoint: where, whether, and the sealed secrets."""

    id: str
    team_id: str
    endpoint: str
    enabled: bool
    secret: str
    previous_secret: str | None
    previous_secret_until: int | None


def _webhook(row: Any) -> Webhook:
    return Webhook(
        row.id,
        row.team_id,
        row.endpoint,
        list(row.events),
        bool(row.enabled),
        row.created_at,
        row.updated_at,
    )


def _target(row: Any) -> Target:
    return Target(
        row.id,
        row.team_id,
        row.endpoint,
        bool(row.enabled),
        row.secret,
        row.previous_secret,
        row.previous_secret_until,
    )


async def insert_webhook(tx: Tx, hook: Webhook, sealed_secret: str) -> None:
    await tx.conn.execute(
        webhooks.insert().values(
            id=hook.id,
            team_id=hook.team_id,
            endpoint=hook.endpoint,
            events=hook.events,
            enabled=hook.enabled,
            secret=sealed_secret,
            created_at=hook.created_at,
            updated_at=hook.updated_at,
        )
    )


async def get_webhook(tx: Tx, team_id: str, webhook_id: str) -> Webhook | None:
    query = select(webhooks).where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
    row = (await tx.conn.execute(query)).first()
    return _webhook(row) if row else None


async def list_webhooks(tx: Tx, team_id: str) -> list[Webhook]:
    query = (
        select(webhooks)
        .where(webhooks.c.team_id == team_id)
        .order_by(webhooks.c.created_at, webhooks.c.id)
    )
    return [_webhook(row) for row in await tx.conn.execute(query)]


async def page_webhooks(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[Webhook], bool] | None:
    """A page of the team's endpoints (oldest first) after the endpoint ``anchor`` (before it
    when ``backwards``), and whether more lie beyond; None when the team has no such endpoint."""
    return await read_page(
        tx,
        webhooks,
        select(webhooks),
        _webhook,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=False,
        backwards=backwards,
    )


async def update_webhook(
    tx: Tx, team_id: str, webhook_id: str, changes: WebhookChanges, now: int
) -> bool:
    """Write the fields ``changes`` gives (and ``updated_at``); False when there is no such row."""
    values: dict[str, Any] = {}
    if changes.endpoint is not None:
        values["endpoint"] = changes.endpoint.url
    if changes.events is not None:
        values["events"] = list(changes.events)
    if changes.enabled is not None:
        values["enabled"] = changes.enabled
    return await _update(tx, team_id, webhook_id, {**values, "updated_at": now})


async def rotate_secret(
    tx: Tx, target: Target, sealed_secret: str, previous_until: int, now: int
) -> bool:
    """Sign with ``sealed_secret`` from now on; the target's current secret stays valid (as a
    second signature) until ``previous_until``."""
    values = {
        "secret": sealed_secret,
        "previous_secret": target.secret,
        "previous_secret_until": previous_until,
        "updated_at": now,
    }
    return await _update(tx, target.team_id, target.id, values)


async def _update(tx: Tx, team_id: str, webhook_id: str, values: dict[str, Any]) -> bool:
    query = (
        update(webhooks)
        .where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
        .values(**values)
    )
    return bool((await tx.conn.execute(query)).rowcount)


async def delete_webhook(tx: Tx, team_id: str, webhook_id: str) -> bool:
    query = delete(webhooks).where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
    return bool((await tx.conn.execute(query)).rowcount)


async def get_target(tx: Tx, team_id: str, webhook_id: str) -> Target | None:
    query = select(webhooks).where(webhooks.c.team_id == team_id, webhooks.c.id == webhook_id)
    row = (await tx.conn.execute(query)).first()
    return _target(row) if row else None


async def targets(tx: Tx, webhook_ids: Collection[str]) -> dict[str, Target]:
    """The endpoints of claimed deliveries (SQLite's claim: its single writer keeps them from
    being deleted until the claim commits)."""
    query = select(webhooks).where(among(tx, webhooks.c.id, webhook_ids))
    return {row.id: _target(row) for row in await tx.conn.execute(query)}
