"""One live job per name, guaranteed by the database.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

* ``uq_jobs_live_job_name``: a partial unique index on ``jobs.job_name`` over the live
  statuses (CREATED, RUNNING, RESTARTING). Two drivers that start a job of the same name at
  once cannot both insert their row (a read-then-insert under READ COMMITTED could); a job
  that ends, or is marked LOST, frees its name in the same transaction.
* Before the index is created, a DB that already holds several live jobs of one name (the
  race above happened) keeps the newest one live and marks the older ones LOST with a
  reason (their drivers stop at their next heartbeat, as for any LOST job).

Frozen: does not import the models.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIVE = "status IN ('CREATED', 'RUNNING', 'RESTARTING')"
_INDEX = "uq_jobs_live_job_name"


def upgrade() -> None:
    reason = ("a newer live job has the same name (schema upgrade 0005: one live job per "
              "name); presumed superseded")
    op.get_bind().execute(
        sa.text(
            "UPDATE jobs SET status = 'LOST', updated_at = :now, failure_reason = :reason "
            f"WHERE {_LIVE} AND EXISTS (SELECT 1 FROM jobs AS newer "
            "WHERE newer.job_name = jobs.job_name "
            "AND newer.status IN ('CREATED', 'RUNNING', 'RESTARTING') "
            "AND (newer.created_at > jobs.created_at OR (newer.created_at = jobs.created_at "
            "AND newer.job_id > jobs.job_id)))"
        ).bindparams(sa.bindparam("now", datetime.now(UTC), type_=sa.DateTime(timezone=True)),
                     sa.bindparam("reason", reason)))
    op.create_index(_INDEX, "jobs", ["job_name"], unique=True,
                    sqlite_where=sa.text(_LIVE), postgresql_where=sa.text(_LIVE))


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="jobs")
