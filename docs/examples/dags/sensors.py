"""The provider's sensors (docs: the DAG author's guide)."""
from datetime import datetime

from airflow.sdk import DAG

from airflow_checkpoint_provider.sensors.checkpoint import (
    CheckpointCompletedSensor,
    ControlRequestSensor,
    JobStateSensor,
)
from airflow_checkpoint_provider.sensors.kafka import KafkaCaughtUpSensor

with DAG("sensor_examples", schedule=None, start_date=datetime(2026, 1, 1)):
    # --8<-- [start:sensors]
    # health gate: 3 checkpoints after the job restored its savepoint, within 10 minutes
    healthy = CheckpointCompletedSensor(task_id="healthy", job="{{ ti.xcom_pull('start') }}",
                                        after_restore=True, min_count=3, timeout=600,
                                        deferrable=True)
    newer = CheckpointCompletedSensor(task_id="newer", job="orders", after_checkpoint_id=41)
    savepointed = CheckpointCompletedSensor(task_id="savepointed", job="orders",
                                            kind="SAVEPOINT", after_time="{{ ts }}")
    running = JobStateSensor(task_id="running", job="orders", target_states=["RUNNING"],
                             failure_states=["FAILED", "CANCELED", "LOST"])
    answered = ControlRequestSensor(
        task_id="answered", request_id="{{ ti.xcom_pull('savepoint', key='request_id') }}")
    # --8<-- [end:sensors]

    # --8<-- [start:kafka]
    # before a blue-green cut-over: green's consumer lag at most 100 records for 30 s
    caught_up = KafkaCaughtUpSensor(
        task_id="green_caught_up",
        job="{{ ti.xcom_pull(task_ids='start_green', key='job_id') }}",
        max_lag=100, for_seconds=30, timeout=1800)
    # --8<-- [end:kafka]
