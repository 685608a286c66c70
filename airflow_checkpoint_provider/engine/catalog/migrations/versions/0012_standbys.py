"""Standby jobs: the signal that a standby is up and only waits for the hand-over.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

* ``standbys``: one row per standby job (``--restore standby:JOB``), keyed by the job id it
  will run under, written by the standby itself: ``READY`` once its application is up and it
  only waits for job ``waits_for_job_id`` to end, then ``TAKEN_OVER`` (restoring
  ``restore_location``), ``CANCELED`` (a client set ``cancel_requested_at`` before the
  hand-over) or ``FAILED`` (``detail``). Airflow waits for ``READY`` before it stops the old
  job (issue 54).

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "standbys",
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("job_name", sa.String(255), nullable=False),
        sa.Column("waits_for_job_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("restore_location", sa.String(1024), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name="pk_standbys"),
    )
    op.create_index("ix_standbys_waits_for_job_id", "standbys", ["waits_for_job_id"])


def downgrade() -> None:
    op.drop_index("ix_standbys_waits_for_job_id", table_name="standbys")
    op.drop_table("standbys")
