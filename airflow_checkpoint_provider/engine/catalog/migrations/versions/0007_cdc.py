"""Replication slot ownership of CDC jobs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

* ``cdc_slot_owners``: per PostgreSQL server (``system_identifier`` or ``host:port``) and
  replication slot name, the job name that owns the slot; a job of another name configured
  with the slot is refused before it starts.

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cdc_slot_owners",
        sa.Column("server", sa.String(255), nullable=False),
        sa.Column("slot", sa.String(63), nullable=False),
        sa.Column("job_name", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("server", "slot", name="pk_cdc_slot_owners"),
    )


def downgrade() -> None:
    op.drop_table("cdc_slot_owners")
