"""Initial schema: jobs, job_attempts, checkpoints, control_requests, shared_state.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

The tables are described in ``airflow_checkpoint_provider/engine/catalog/models.py``.
This revision is frozen: it does not import the models, so later model changes cannot
alter what it creates.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("job_name", sa.String(255), nullable=False),
        sa.Column("version", sa.String(255), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("restored_from", sa.Text(), nullable=True),
        sa.Column("spark_app_id", sa.String(255), nullable=True),
        sa.Column("parallelism", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("heartbeat_at", _TS, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_job_name", "jobs", ["job_name"])

    op.create_table(
        "job_attempts",
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("ended_at", _TS, nullable=True),
        sa.Column("restored_checkpoint_id", sa.BigInteger(), nullable=True),
        sa.Column("restored_from", sa.Text(), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name="fk_job_attempts_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "attempt", name="pk_job_attempts"),
    )

    op.create_table(
        "checkpoints",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("is_final", sa.Boolean(), nullable=False),
        sa.Column("trigger_time", _TS, nullable=False),
        sa.Column("complete_time", _TS, nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("state_size", sa.BigInteger(), nullable=True),
        sa.Column("checkpointed_size", sa.BigInteger(), nullable=True),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("task_stats", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name="fk_checkpoints_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_checkpoints"),
        sa.UniqueConstraint("job_id", "checkpoint_id", name="uq_checkpoints_job_id_checkpoint_id"),
    )
    op.create_index("ix_checkpoints_status_kind", "checkpoints", ["status", "kind"])

    op.create_table(
        "control_requests",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("params", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name="fk_control_requests_job_id_jobs",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("request_id", name="pk_control_requests"),
    )
    op.create_index("ix_control_requests_job_id_status", "control_requests", ["job_id", "status"])

    op.create_table(
        "shared_state",
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("file_key", sa.String(512), nullable=False),
        sa.Column("created_by_checkpoint", sa.BigInteger(), nullable=False),
        sa.Column("last_used_checkpoint", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name="fk_shared_state_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "file_key", name="pk_shared_state"),
    )


def downgrade() -> None:
    op.drop_table("shared_state")
    op.drop_index("ix_control_requests_job_id_status", table_name="control_requests")
    op.drop_table("control_requests")
    op.drop_index("ix_checkpoints_status_kind", table_name="checkpoints")
    op.drop_table("checkpoints")
    op.drop_table("job_attempts")
    op.drop_index("ix_jobs_job_name", table_name="jobs")
    op.drop_table("jobs")
