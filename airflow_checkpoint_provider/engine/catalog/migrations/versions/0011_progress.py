"""The progress watchdog's verdict in the job row.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

* ``jobs.progress_stall``: NULL while the job progresses; else where its records or its
  watermark stopped (a JSON object: ``operator``, ``kind``, ``since``, ``queued``, ``chain``,
  ``threshold_s``, ``detail``), written by the job master when the progress watchdog's
  verdict changes, shown by ``ckpt jobs`` and the checkpoint report.

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("progress_stall", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("progress_stall")
