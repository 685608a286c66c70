"""Blue-green upgrade: run the new version (green) next to the old one (blue) first.

savepoint blue -> start green from it -> health gate: green RUNNING with at least
``min_checkpoints`` completed checkpoints after its restore within ``gate_timeout`` seconds
-> stop blue with a savepoint. If the gate fails, green is cancelled and blue keeps
running untouched (task ``keep_blue`` says so in its log); the run ends failed.

Blue and green must have different job names (each name has at most one running job).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, TriggerRule, task

from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.operators.control import (
    CancelJobOperator,
    StopWithSavepointOperator,
    TriggerSavepointOperator,
)
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
GREEN_JOB_ID = "{{ ti.xcom_pull(task_ids='start_green', key='job_id') }}"
GATE_TIMEOUT_S = 180

# Control tasks are idempotent (a retry waits for its earlier try's request): retry them
# through Airflow's own faults, e.g. a deferral race that marks a finished try failed.
CONTROL_RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=5)}

with DAG(
    dag_id="blue_green_upgrade",
    description="start green from blue's savepoint, promote it only if it is healthy",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint", "upgrade"],
    render_template_as_native_obj=True,
    params={
        "blue_job": Param("versioned-sum-blue", type="string"),
        "green_job": Param("versioned-sum-green", type="string"),
        "green_pipeline": Param(f"{EXAMPLE}:build_v2", type="string"),
        "savepoint_dir": Param("", type="string",
                               description="savepoint directory (empty: the job's own)"),
        "runner": Param("spark", enum=["spark", "local"]),
        "job_env": Param({}, type="object", description="environment of the green job"),
        "min_checkpoints": Param(3, type="integer", minimum=1),
    },
) as dag:
    savepoint_blue = TriggerSavepointOperator(
        task_id="savepoint_blue", **CONTROL_RETRIES, job="{{ params.blue_job }}",
        directory="{{ params.savepoint_dir }}", deferrable=True)
    start_green = SubmitCheckpointedJobOperator(
        task_id="start_green", pipeline="{{ params.green_pipeline }}",
        job_name="{{ params.green_job }}",
        restore="{{ ti.xcom_pull(task_ids='savepoint_blue') }}", wait_for="running",
        runner="{{ params.runner }}", env_vars="{{ params.job_env }}")
    health_gate = CheckpointCompletedSensor(
        task_id="health_gate", job=GREEN_JOB_ID, min_count="{{ params.min_checkpoints }}",
        after_restore=True, require_running=True, deferrable=True, poke_interval=1, timeout=GATE_TIMEOUT_S)
    stop_blue = StopWithSavepointOperator(
        task_id="stop_blue", **CONTROL_RETRIES, job="{{ params.blue_job }}", directory="{{ params.savepoint_dir }}",
        deferrable=True)

    cancel_green = CancelJobOperator(
        task_id="cancel_green", **CONTROL_RETRIES, job=GREEN_JOB_ID, missing_ok=True,
        trigger_rule=TriggerRule.ONE_FAILED)

    @task(task_id="keep_blue")
    def keep_blue(params=None, ti=None) -> str:
        """Say what happened: green cancelled (or never ran), blue untouched and running."""
        hook = CheckpointMetadataHook()
        blue = hook.resolve_job(params["blue_job"])
        green_id = ti.xcom_pull(task_ids="start_green", key="job_id")
        green = hook.find_job(green_id) if green_id else None
        logging.getLogger(__name__).warning(
            "Health gate failed: green %s; blue %s (%s) keeps running (status %s)",
            f"{green.job_name} ({green.job_id}) is {green.status}"
            + (f": {green.failure_reason}" if green.failure_reason else "")
            if green else "never started", blue.job_name, blue.job_id, blue.status)
        if blue.status != "RUNNING":
            raise RuntimeError(f"blue {blue.job_name} ({blue.job_id}) is {blue.status}, not RUNNING")
        return blue.job_id

    savepoint_blue >> start_green >> health_gate >> stop_blue
    [start_green, health_gate] >> cancel_green >> keep_blue()
