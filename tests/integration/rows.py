"""Table rows for the storage tests that write through ``storage.bulk`` directly."""

from __future__ import annotations

from typing import Any

from posthaste.core.ids import new_id
from posthaste.core.jobs import JobKind


def job_row(team_id: str, attempts: int = 0) -> dict[str, Any]:
    return {
        "kind": JobKind.DELIVER_EMAIL,
        "ref": new_id(),
        "team_id": team_id,
        "available_at": 5,
        "attempts": attempts,
        "created_at": 1,
    }


def api_key_row(team_id: str) -> dict[str, Any]:
    return {
        "id": new_id(),
        "team_id": team_id,
        "name": "k",
        "token_hash": new_id(),
        "token_hint": "ph_",
        "mode": "live",
        "permission": "full_access",
        "created_at": 1,
    }


def webhook_row(team_id: str, events: list[str]) -> dict[str, Any]:
    """An enabled endpoint of the team subscribed to ``events`` (its secret opens nothing: for
    tests of what the writes fan out, not of deliveries)."""
    return {
        "id": new_id(),
        "team_id": team_id,
        "endpoint": "https://hooks.example.com/in",
        "events": events,
        "enabled": True,
        "secret": "sealed",
        "previous_secret": None,
        "previous_secret_until": None,
        "created_at": 1,
        "updated_at": 1,
    }
