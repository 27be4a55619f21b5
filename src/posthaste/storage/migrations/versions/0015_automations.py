"""Automations: their graph versions, runs and the steps each run reached

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)


def _fk(table: str, column: str, parent: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{parent}.id"], name=op.f(f"fk_{table}_{column}_{parent}"), ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "automations",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("mode", sa.String(length=8), nullable=False),
        sa.Column("version_id", ID, nullable=False),
        sa.Column("trigger_event", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        _fk("automations", "team_id", "teams"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_automations")),
    )
    op.create_index("ix_automations_team_created", "automations", ["team_id", "created_at", "id"])
    op.create_index("ix_automations_team_trigger", "automations", ["team_id", "trigger_event"])

    op.create_table(
        "automation_versions",
        sa.Column("id", ID, nullable=False),
        sa.Column("automation_id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("graph", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        _fk("automation_versions", "automation_id", "automations"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_automation_versions")),
    )
    op.create_index("ix_automation_versions_automation", "automation_versions", ["automation_id"])

    op.create_table(
        "automation_runs",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("automation_id", ID, nullable=False),
        sa.Column("version_id", ID, nullable=False),
        sa.Column("contact_id", ID, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("current_step", sa.String(length=64), nullable=True),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.Column("waiting_for", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        _fk("automation_runs", "automation_id", "automations"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_automation_runs")),
    )
    op.create_index(
        "ix_automation_runs_automation_created",
        "automation_runs",
        ["automation_id", "created_at", "id"],
    )
    op.create_index(
        "ix_automation_runs_waiting", "automation_runs", ["team_id", "contact_id", "waiting_for"]
    )

    op.create_table(
        "automation_run_steps",
        sa.Column("run_id", ID, nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        _fk("automation_run_steps", "run_id", "automation_runs"),
        sa.PrimaryKeyConstraint("run_id", "key", name=op.f("pk_automation_run_steps")),
    )


def downgrade() -> None:
    for table in ("automation_run_steps", "automation_runs", "automation_versions", "automations"):
        op.drop_table(table)
