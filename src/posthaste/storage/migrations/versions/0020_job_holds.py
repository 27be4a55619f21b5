"""Jobs count their holds apart from their claims; destinations measure the pace taken

``jobs.holds``: mail held for a throttled destination goes back to the queue without being sent;
the hold is counted there and ``attempts`` (the claim counter, the fencing token) only grows.
``destinations.window_us``, ``window_slots``, ``used_interval_us``: the slots the fleet claimed
in the current window and the mean interval between them over the last one.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_MEASURED = ("window_us", "window_slots", "used_interval_us")


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("holds", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    for name in _MEASURED:
        op.add_column(
            "destinations",
            sa.Column(name, sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        )


def downgrade() -> None:
    with op.batch_alter_table("destinations") as batch:
        for name in _MEASURED:
            batch.drop_column(name)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("holds")
