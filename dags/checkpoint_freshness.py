"""Alert when a job's newest checkpoint is older than a bound (a Deadline Alert).

Every ten minutes (cron ``*/10 * * * *``) a run waits, in the triggerer, for a checkpoint of
the job completed after the run started; it finishes as soon as one does. If none completes
within ``$CKPT_MAX_CHECKPOINT_AGE_MIN`` minutes (default 5) of the run being queued, the
Deadline Alert fires: its callback logs the job's status, newest checkpoint (with its age)
and newest savepoint (:func:`airflow_checkpoint_provider.deadlines.checkpoint_age_deadline`);
the run itself keeps waiting until ``timeout`` and then fails.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_checkpoint_provider.deadlines import checkpoint_age_deadline
from airflow_checkpoint_provider.params import EXAMPLE_DEFAULT_ARGS
from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor

JOB_NAME = os.environ.get("CKPT_FRESHNESS_JOB", "versioned-sum")
MAX_AGE = timedelta(minutes=float(os.environ.get("CKPT_MAX_CHECKPOINT_AGE_MIN", "5")))

with DAG(
    dag_id="checkpoint_freshness",
    default_args=EXAMPLE_DEFAULT_ARGS,
    description="a Deadline Alert when no checkpoint completed within the bound",
    schedule="*/10 * * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["checkpoint", "monitoring"],
    deadline=checkpoint_age_deadline(JOB_NAME, MAX_AGE),
) as dag:
    CheckpointCompletedSensor(
        task_id="fresh_checkpoint", job=JOB_NAME, kind="CHECKPOINT",
        after_time="{{ dag_run.start_date }}", deferrable=True, poke_interval=10,
        timeout=MAX_AGE.total_seconds() * 2)
