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

A manual run's conf may choose the job name, a savepoint directory under
``SAVEPOINT_ROOTS`` (the example's ``$CKPT_EXAMPLE_DIR/savepoints`` and the deployment's
``$CKPT_ALLOWED_SAVEPOINT_ROOTS``, read in the worker; empty: the job's own) and bounded
retention figures; task ``check_conf`` checks them again in the worker (symlinks resolved)
before the savepoint is requested.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_checkpoint_provider.deadlines import savepoint_deadline
from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator
from airflow_checkpoint_provider.operators.savepoints import DisposeSavepointsOperator
from airflow_checkpoint_provider.params import (
    EXAMPLE_DEFAULT_ARGS,
    check_run_params,
    directory_param,
    example_savepoint_roots,
    job_name_param,
)

# Control tasks are idempotent (a retry waits for its earlier try's request): retry them
# through Airflow's own faults, e.g. a deferral race that marks a finished try failed.
CONTROL_RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=5)}
JOB_NAME = os.environ.get("CKPT_SAVEPOINT_JOB", "versioned-sum")
# where a run's conf may put savepoints: read in the worker (example_savepoint_roots:
# $CKPT_EXAMPLE_DIR/savepoints and $CKPT_ALLOWED_SAVEPOINT_ROOTS), checked by check_conf
SAVEPOINT_ROOTS = example_savepoint_roots
PARAMS = {
    "job_name": job_name_param(JOB_NAME),
    "savepoint_dir": directory_param("savepoint directory (empty: the job's own)"),
    "max_count": Param(24, type="integer", minimum=1, maximum=1_000),
    "max_age_hours": Param(72, type="number", minimum=0, maximum=24 * 366),
}

with DAG(
    dag_id="scheduled_savepoints",
    default_args=EXAMPLE_DEFAULT_ARGS,
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
    params=PARAMS,
) as dag:

    @task(task_id="check_conf")
    def check_conf(params=None) -> None:
        """The run's params against this file's schemas and roots (symlinks resolved),
        before the savepoint is requested."""
        check_run_params(params, PARAMS, {"savepoint_dir": SAVEPOINT_ROOTS})

    savepoint = TriggerSavepointOperator(
        task_id="savepoint", **CONTROL_RETRIES, job="{{ params.job_name }}", directory="{{ params.savepoint_dir }}",
        deferrable=True)
    retention = DisposeSavepointsOperator(
        task_id="retention", job_name="{{ params.job_name }}",
        max_count="{{ params.max_count }}", max_age_seconds="{{ params.max_age_hours * 3600 }}")

    check_conf() >> savepoint >> retention
