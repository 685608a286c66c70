"""Start a checkpointed job on Spark, wait for its first checkpoint, savepoint it hourly."""
from datetime import datetime

from airflow.sdk import DAG

from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor

with DAG("orders_pipeline", schedule="@hourly", start_date=datetime(2026, 1, 1), catchup=False):
    start = SubmitCheckpointedJobOperator(  # attaches to the job if it already runs
        task_id="start", pipeline="airflow_checkpoint_provider.examples.versioned_sum:build_v1",
        job_name="orders", restore="latest", wait_for="running")
    healthy = CheckpointCompletedSensor(task_id="healthy", job="orders", deferrable=True,
                                        after_time="{{ data_interval_end }}", timeout=600)
    savepoint = TriggerSavepointOperator(task_id="savepoint", job="orders", deferrable=True)
    start >> healthy >> savepoint
