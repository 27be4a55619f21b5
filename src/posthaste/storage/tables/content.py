"""Templates and their immutable versions."""

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

# Templates (issue 5): a template names its draft version (the latest content) and, once
# published, the version sends use. Versions are immutable: an edit writes a new version.

templates = Table(
    "templates",
    metadata,
    Column("id", ID, primary_key=True),
    Column("team_id", ID, ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("alias", String(64), nullable=True),
    Column("draft_version_id", ID, nullable=False),
    Column("published_version_id", ID, nullable=True),
    Column("published_at", MS, nullable=True),
    Column("created_at", MS, nullable=False),
    Column("updated_at", MS, nullable=False),
    UniqueConstraint("team_id", "alias", name="uq_templates_team_alias"),
    Index("ix_templates_team_created", "team_id", "created_at", "id"),
)

template_versions = Table(
    "template_versions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("template_id", ID, ForeignKey("templates.id", ondelete="CASCADE"), nullable=False),
    Column("team_id", ID, nullable=False),
    Column("subject", Text, nullable=True),
    Column("html", Text, nullable=True),
    Column("text", Text, nullable=True),
    Column("variables", JSON, nullable=False),
    Column("created_at", MS, nullable=False),
    Index("ix_template_versions_template", "template_id"),
)
