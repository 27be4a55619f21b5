"""Contact imports: the import with its progress, and its CSV in parts

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)


def upgrade() -> None:
    op.create_table(
        "contact_imports",
        sa.Column("id", ID, nullable=False),
        sa.Column("team_id", ID, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("on_conflict", sa.String(length=8), nullable=False),
        sa.Column("segment_ids", sa.JSON(), nullable=False),
        sa.Column("header", sa.JSON(), nullable=False),
        sa.Column("parts", sa.Integer(), nullable=False),
        sa.Column("next_part", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("created", sa.Integer(), nullable=False),
        sa.Column("updated", sa.Integer(), nullable=False),
        sa.Column("skipped", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["team_id"], ["teams.id"], name=op.f("fk_contact_imports_team_id_teams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contact_imports")),
    )  # fmt: skip
    op.create_index(
        "ix_contact_imports_team_created", "contact_imports", ["team_id", "created_at", "id"]
    )
    op.create_table(
        "contact_import_parts",
        sa.Column("import_id", ID, nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("first_line", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["import_id"], ["contact_imports.id"],
            name=op.f("fk_contact_import_parts_import_id_contact_imports"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("import_id", "seq", name=op.f("pk_contact_import_parts")),
    )  # fmt: skip


def downgrade() -> None:
    op.drop_table("contact_import_parts")
    op.drop_table("contact_imports")
