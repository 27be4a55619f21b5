"""Claims by kind read an index of their own

``ix_jobs_kind_due`` on ``jobs (kind, available_at, id)``: a claim lane takes the due jobs of
one kind in due order (``storage/jobs.claim_lanes``), reading that kind's first due entries and
stopping, instead of scanning ``ix_jobs_available`` past every due job of the other kinds (9 ms
a claim behind 10,000 due automation steps, a sequential scan of the table for the rare kinds).
Built in the migrations' one transaction (not ``CONCURRENTLY``, which cannot run in it): writers
of ``jobs`` wait for the build, about a second per million queued jobs; the queue is usually
small.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ix_jobs_kind_due"
_COLUMNS = ["kind", "available_at", "id"]


def upgrade() -> None:
    op.create_index(_NAME, "jobs", _COLUMNS, unique=False)


def downgrade() -> None:
    op.drop_index(_NAME, table_name="jobs")
