"""Keyed state size per operator uid of every completed checkpoint.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

``operator_state_sizes``: one row per (job, checkpoint, operator uid) with keyed state:
``state_bytes``, ``states`` (comma-separated state names), ``subtasks``. "Which state grew"
is one query over it (README, "Reading and writing state as tables").

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operator_state_sizes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("operator_uid", sa.String(255), nullable=False),
        sa.Column("states", sa.Text(), nullable=False),
        sa.Column("state_bytes", sa.BigInteger(), nullable=False),
        sa.Column("subtasks", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.job_id"],
                                name="fk_operator_state_sizes_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_operator_state_sizes"),
        sa.UniqueConstraint("job_id", "checkpoint_id", "operator_uid",
                            name="uq_operator_state_sizes_job_id_checkpoint_id_operator_uid"),
    )


def downgrade() -> None:
    op.drop_table("operator_state_sizes")
