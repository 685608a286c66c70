"""Take a savepoint of a running job on a cron schedule and keep only the newest ones.

The schedule is a cron expression (``$CKPT_SAVEPOINT_CRON``, default ``0 * * * *``: every
hour on the hour; e.g. ``30 2 * * *`` for 02:30 every night, or ``0 */6 * * 1-5`` on
weekdays). A Deadline Alert fires when a run has not finished (its savepoint has not
completed) ``$CKPT_SAVEPOINT_DEADLINE_MIN`` minutes (default 15) after it was queued; the
alert logs the job's status, newest checkpoint and newest savepoint
(:mod:`airflow_checkpoint_provider.deadlines`).

The savepoint task's return value (XCom) is the savepoint's path, and it emits an Airflow
asset event of ``checkpoint://<job_name>/savepoints`` (extras: job id, job name, checkpoint
id, location, kind): DAGs scheduled on that asset run after each savepoint (see
``on_new_savepoint.py``). Retention then disposes savepoints older than ``max_age_hours`` or
beyond the newest ``max_count``; the newest one, any a running job was restored from and any
pinned one are always kept. Its XCom ``retention_report`` says, per savepoint, what it did
and why.

The workflow is :func:`airflow_checkpoint_provider.workflows.scheduled_savepoints`; this file
fixes its arguments, the schedule and the deadline. A manual run's conf may choose the job
name (any name: the example family's jobs, ``allowed_owner_dags``), a savepoint directory under
``SAVEPOINT_ROOTS`` (the example's ``$CKPT_EXAMPLE_DIR/savepoints`` and the deployment's
``$CKPT_ALLOWED_SAVEPOINT_ROOTS``, read in the worker; empty: the job's own) and bounded
retention figures; task ``check_conf`` checks them again in the worker (symlinks resolved)
before the savepoint is requested.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_checkpoint_provider.deadlines import savepoint_deadline
from airflow_checkpoint_provider.params import EXAMPLE_DAGS, example_savepoint_roots
from airflow_checkpoint_provider.workflows import scheduled_savepoints

JOB_NAME = os.environ.get("CKPT_SAVEPOINT_JOB", "versioned-sum")
# where a run's conf may put savepoints: read in the worker (example_savepoint_roots:
# $CKPT_EXAMPLE_DIR/savepoints and $CKPT_ALLOWED_SAVEPOINT_ROOTS), checked by check_conf
SAVEPOINT_ROOTS = example_savepoint_roots

with DAG(
    dag_id="scheduled_savepoints",
    description="savepoint of a running job on a cron schedule, with retention",
    schedule=os.environ.get("CKPT_SAVEPOINT_CRON", "0 * * * *"),
    deadline=savepoint_deadline(JOB_NAME, timedelta(
        minutes=float(os.environ.get("CKPT_SAVEPOINT_DEADLINE_MIN", "15")))),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["checkpoint"],
    render_template_as_native_obj=True,
) as dag:
    scheduled_savepoints(job_name=JOB_NAME, any_job_name=True,
                         savepoint_roots=SAVEPOINT_ROOTS, max_count=24, max_age_hours=72,
                         allowed_owner_dags=EXAMPLE_DAGS)
