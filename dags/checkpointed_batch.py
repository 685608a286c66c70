"""Run a bounded checkpointed job to its end; a retry resumes from its latest checkpoint.

The task derives the job id from the task instance and try number: try N > 1 restores the
newest completed checkpoint of the jobs of the earlier tries, so a job that failed at 90 %
does not start over.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator

with DAG(
    dag_id="checkpointed_batch",
    description="a bounded checkpointed job; retries resume from the latest checkpoint",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint"],
    render_template_as_native_obj=True,
    params={
        "pipeline": Param("airflow_checkpoint_provider.examples.running_sum:build", type="string"),
        "job_name": Param("running-sum", type="string"),
        "runner": Param("spark", enum=["spark", "local"]),
        "job_env": Param({}, type="object", description="environment of the job"),
    },
) as dag:
    SubmitCheckpointedJobOperator(
        task_id="run_batch", pipeline="{{ params.pipeline }}", job_name="{{ params.job_name }}",
        wait_for="finished", runner="{{ params.runner }}", env_vars="{{ params.job_env }}",
        retries=2, retry_delay=timedelta(seconds=1))
