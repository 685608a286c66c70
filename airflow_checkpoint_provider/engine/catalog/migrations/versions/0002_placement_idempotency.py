"""Where an attempt's slots ran, and idempotency keys of control requests.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

* ``job_attempts.placement``: JSON list, one entry per slot: ``{"slot", "host", "pid",
  "executor_id", "executor_address", "work_dir"}`` (``executor_id`` is ``"driver"`` when
  Spark ran the slot in local mode, ``null`` with the local runner).
* ``control_requests.idempotency_key``: set by clients that may retry the same logical
  request (an Airflow task's retry or re-run); a second submission with the same key
  returns the first request instead of creating another. Unique when not null.

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job_attempts") as batch:
        batch.add_column(sa.Column("placement", sa.JSON(), nullable=True))
    with op.batch_alter_table("control_requests") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(255), nullable=True))
        batch.create_index("ix_control_requests_idempotency_key", ["idempotency_key"],
                           unique=True)


def downgrade() -> None:
    with op.batch_alter_table("control_requests") as batch:
        batch.drop_index("ix_control_requests_idempotency_key")
        batch.drop_column("idempotency_key")
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("placement")
