"""Held mail gets its turn; a job keeps why it was last held

``destinations.held_until_us``: the latest time (epoch µs) given to mail held for the
destination; the next held mail is given its turn a step after it, so the fleet's held mail
comes back spread at the destination's pace instead of all at once.
``jobs.hold_reason``: why the job was last put back unsent (its destination busy, its pool at
its warm-up cap), for the note at the start of its next real attempt's transcript.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "destinations",
        sa.Column("held_until_us", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column("jobs", sa.Column("hold_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("hold_reason")
    with op.batch_alter_table("destinations") as batch:
        batch.drop_column("held_until_us")
