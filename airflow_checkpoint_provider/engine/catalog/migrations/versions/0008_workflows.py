"""The Airflow DAG that submitted a job.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

* ``jobs.dag_id``: the DAG whose task submitted the job (``SubmitCheckpointedJobOperator``),
  NULL for a job started outside Airflow. The UI plugin shows a user only the jobs of DAGs
  they may read.

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("dag_id", sa.String(250), nullable=True))
        batch.create_index("ix_jobs_dag_id", ["dag_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_dag_id")
        batch.drop_column("dag_id")
