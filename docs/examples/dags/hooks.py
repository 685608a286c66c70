"""The metadata hook in a task of your own (docs: the DAG author's guide, Hooks).

A TaskFlow task reads a job's latest completed checkpoint through
``CheckpointMetadataHook``, acting for its DAG: a job another DAG submitted is refused
(``JobOwnershipError``). ``CheckpointSubmitHook`` is what ``SubmitCheckpointedJobOperator``
launches jobs with; use the operator rather than the hook.
"""
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.ownership import DagAccess

with DAG("hook_examples", schedule=None, start_date=datetime(2026, 1, 1)):
    # --8<-- [start:metadata]
    @task
    def latest_checkpoint(job_name: str, dag=None) -> dict | None:
        hook = CheckpointMetadataHook("checkpoint_metadata_default",
                                      access=DagAccess(dag_id=dag.dag_id))
        try:
            rec = hook.latest_completed_checkpoint(job_name=job_name)
            if rec is None:
                return None  # no completed checkpoint yet
            return {"job_id": rec.job_id, "checkpoint_id": rec.checkpoint_id,
                    "location": rec.location, "duration_ms": rec.duration_ms}
        finally:
            hook.close()

    latest_checkpoint("orders")
    # --8<-- [end:metadata]
