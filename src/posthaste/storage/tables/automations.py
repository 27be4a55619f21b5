"""Automations, their versions, runs and steps, and custom event definitions."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    ForeignKey,
    Index,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from posthaste.storage.tables._base import ID, MS, metadata

# Automations: a graph of steps (its versions: a changed graph is a new version; a run keeps the
# version it started with), and runs, each one contact's way through a version, with a row per
# step it reached (the primary key makes each step of a run happen at most once). A run's
# ``contact_id`` is no foreign key: a run outlives the contact it deleted.

automations = Table(
    "automations",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("mode", String(8), nullable=False),
    Column("version_id", ID, nullable=False),
    Column("trigger_event", String(100), nullable=False),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    Index("ix_automations_team_created", "team_id", "created_at", "id"),
    Index("ix_automations_team_trigger", "team_id", "trigger_event"),
)

automation_versions = Table(
    "automation_versions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("automation_id", ID, ForeignKey("automations.id", ondelete="CASCADE"), nullable=False),
    Column("team_id", ID, nullable=False),
    Column("graph", JSON, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_automation_versions_automation", "automation_id"),
)

automation_runs = Table(
    "automation_runs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("automation_id", ID, ForeignKey("automations.id", ondelete="CASCADE"), nullable=False),
    Column("version_id", ID, nullable=False),
    Column("contact_id", ID, nullable=False),
    Column("status", String(16), nullable=False),
    Column("current_step", String(64), nullable=True),
    Column("event", JSON, nullable=False),
    Column("waiting_for", String(100), nullable=True),
    Column("created_at", MS, nullable=False),
    Column("completed_at", MS, nullable=True),
    Index("ix_automation_runs_automation_created", "automation_id", "created_at", "id"),
    Index("ix_automation_runs_waiting", "team_id", "contact_id", "waiting_for"),
)

automation_run_steps = Table(
    "automation_run_steps",
    metadata,
    Column("run_id", ID, ForeignKey("automation_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(64), primary_key=True),
    Column("team_id", ID, nullable=False),
    Column("type", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", MS, nullable=False),
    Column("completed_at", MS, nullable=True),
    Column("output", JSON, nullable=True),
    Column("error", Text, nullable=True),
)

# Event definitions (Resend's ``/events``): a custom event's name declared with an optional
# schema that ``POST /events/send`` checks its payload against. Unique name per team.

event_definitions = Table(
    "event_definitions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(100), nullable=False),
    Column("schema", JSON, nullable=True),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    UniqueConstraint("team_id", "name", name="uq_event_definitions_team_name"),
    Index("ix_event_definitions_team_created", "team_id", "created_at", "id"),
)
