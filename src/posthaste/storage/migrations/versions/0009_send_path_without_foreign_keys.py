"""The send path's tables keep no foreign keys: emails → teams, and an email's recipients,
tags, subject and attachments → emails

Every accepted email inserts one row into ``emails`` and rows into its child tables, all in one
statement that the send path builds from the same ids (``storage/emails.store_accepted``); a
child never exists without its email by construction. The constraints only re-checked that, one
trigger call per row: on PostgreSQL a fifth to a quarter of the statement's execution time for
a batch of 100 emails (EXPLAIN ANALYZE, bench/README.md). Nothing deletes emails today; the
retention purge deletes each table's old rows itself, by ``created_at``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, constraint, its column, the table it referred to)
DROPPED = (
    ("emails", "fk_emails_team_id_teams", "team_id", "teams"),
    ("email_recipients", "fk_email_recipients_email_id_emails", "email_id", "emails"),
    ("email_tags", "fk_email_tags_email_id_emails", "email_id", "emails"),
    ("email_subjects", "fk_email_subjects_email_id_emails", "email_id", "emails"),
    ("attachments", "fk_attachments_email_id_emails", "email_id", "emails"),
)


def upgrade() -> None:
    for table, name, _, _ in DROPPED:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(name, type_="foreignkey")


def downgrade() -> None:
    for table, name, column, parent in DROPPED:
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(name, parent, [column], ["id"], ondelete="CASCADE")
