"""The events table loses ``ix_events_team``, an index no query reads

Every email accepted writes its first event, and every status change another; each event row
updated ``ix_events_team (team_id, id)`` besides the three indexes its readers need. None reads
it (``storage/`` examined, 2026-11-28): the live stream walks ``ix_events_stream (team_id, txid,
id)`` on PostgreSQL and ``ix_events_team_rowid`` on SQLite; an email's events come from
``ix_events_email (email_id, id)``; one event by id (``events.position_of``, the webhook queue's
envelopes) from the primary key; the retention purge deletes by id range, the primary key
again. Every index of the tables a send writes, with its readers: bench/README.md, "Accepting
email", 2026-11-28 (branch ``batch``).

Dropping an index takes an ACCESS EXCLUSIVE lock on ``events`` for a moment; nothing is
rebuilt. The downgrade builds it again (in the migrations' one transaction: writers of
``events`` wait for it, about a second per few million events).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ix_events_team"


def upgrade() -> None:
    op.drop_index(_NAME, table_name="events")


def downgrade() -> None:
    op.create_index(_NAME, "events", ["team_id", "id"], unique=False)
