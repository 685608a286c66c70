"""Jobs belong to the DAG that created them; a job row names its driver process.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

* ``job_owners``: the DAG and DAG run a job id is reserved for, written by the Airflow task
  before it launches the job; ``create_job`` copies it into the job's row.
* ``jobs.dag_run_id``: the DAG run whose task submitted the job.
* ``jobs.driver_host``, ``jobs.driver_process``: the host and process (``pid:start:boot``)
  of the job's driver, so a restart on the same host sees at once that a killed driver is
  gone instead of waiting for its heartbeat to time out.

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_owners",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("dag_run_id", sa.String(250), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("dag_run_id", sa.String(250), nullable=True))
        batch.add_column(sa.Column("driver_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("driver_process", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("driver_process")
        batch.drop_column("driver_host")
        batch.drop_column("dag_run_id")
    op.drop_table("job_owners")
