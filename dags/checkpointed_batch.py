"""Run a bounded checkpointed job to its end; a retry resumes from its latest checkpoint.

The task derives the job id from the task instance and try number: try N > 1 restores the
newest completed checkpoint of the jobs of the earlier tries, so a job that failed at 90 %
does not start over.

A run's conf may choose the pipeline (one of ``PIPELINES``), the job name, the runner and the
pipeline's options in ``job_env`` within the bounds of ``EXAMPLE_ENV`` (records, keys, rate,
parallelism 1-4, ...). It names no directory: the example writes under the worker's
``$CKPT_EXAMPLE_DIR`` (the deployment's), whoever triggers the run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.params import (
    EXAMPLE_DEFAULT_ARGS,
    EXAMPLE_ENV,
    EXAMPLES,
    job_env_param,
    job_name_param,
    pipeline_param,
)

# A DAG run's conf is untrusted: a triggering user picks one of these pipelines (the DAG
# author's allowlist) and sets only these environment variables, within their bounds (the
# operator checks them again: env_schema). No path, no URL.
PIPELINES = (f"{EXAMPLES}.running_sum:build", f"{EXAMPLES}.flaky_batch:build")
JOB_ENV = EXAMPLE_ENV

with DAG(
    dag_id="checkpointed_batch",
    default_args=EXAMPLE_DEFAULT_ARGS,
    description="a bounded checkpointed job; retries resume from the latest checkpoint",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint"],
    render_template_as_native_obj=True,
    params={
        "pipeline": pipeline_param(PIPELINES[0], PIPELINES),
        "job_name": job_name_param("running-sum"),
        "runner": Param("spark", enum=["spark", "local"]),
        "job_env": job_env_param({}, JOB_ENV),
    },
) as dag:
    SubmitCheckpointedJobOperator(
        task_id="run_batch", pipeline="{{ params.pipeline }}", job_name="{{ params.job_name }}",
        wait_for="finished", runner="{{ params.runner }}", env_vars="{{ params.job_env }}",
        env_schema=JOB_ENV, retries=2, retry_delay=timedelta(seconds=1))
