"""The delivery path's claim reads its index in order, and attempts keep no foreign key

``jobs`` is claimed with ``available_at <= now ... ORDER BY available_at, id LIMIT n``; an index
on ``available_at`` alone made PostgreSQL fetch every due job and sort them for each claim (a
backlog of 10,000 emails meant sorting 10,000 rows to take 32). On ``(available_at, id)`` the
claim reads the first ``n`` entries in order and stops. ``ix_jobs_ref`` (the lookups of one
job by kind and reference) was led by ``kind``, which drew the planner to find the claimed
kinds' rows through it and sort them whenever its estimates were off (a new or unanalysed
table); led by ``ref`` it serves those lookups and leaves the claim to the ordered index.

``delivery_attempts.email_id`` referred to ``emails`` with a foreign key: one trigger query per
attempt row, locking the email's row ``FOR KEY SHARE`` in the transaction that has just
updated it. The worker writes an attempt only for an email it has claimed and loaded, as the
send path writes an email's children from the same ids (migration 0009).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_available")
        batch.create_index("ix_jobs_available", ["available_at", "id"], unique=False)
        batch.drop_index("ix_jobs_ref")
        batch.create_index("ix_jobs_ref", ["ref", "kind"], unique=False)
    with op.batch_alter_table("delivery_attempts") as batch:
        batch.drop_constraint("fk_delivery_attempts_email_id_emails", type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("delivery_attempts") as batch:
        batch.create_foreign_key(
            "fk_delivery_attempts_email_id_emails",
            "emails",
            ["email_id"],
            ["id"],
            ondelete="CASCADE",
        )
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_ref")
        batch.create_index("ix_jobs_ref", ["kind", "ref"], unique=False)
        batch.drop_index("ix_jobs_available")
        batch.create_index("ix_jobs_available", ["available_at"], unique=False)
