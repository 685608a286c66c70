"""What a DAG run's conf may choose: values the DAG author fixed in this file.

A user who may trigger this DAG picks the source connection among ``CDC_CONNECTIONS``, the
tables (a pattern), the parallelism (1-4) and a savepoint directory under ``SAVEPOINT_ROOTS``.
The conf never holds a URL, a host, a credential or a path of its own: the connection's URI
is resolved in the worker and reaches the job's environment only.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.params import (
    check_run_params,
    connection_param,
    directory_param,
    env_integer,
    env_pattern,
    job_env_param,
    job_name_param,
    pipeline_param,
)

# --8<-- [start:choices]
PIPELINES = ("jobs.orders:build",)  # code: only these
CDC_CONNECTIONS = ("orders_db", "orders_db_replica")  # hosts and credentials: Airflow connections
SAVEPOINT_ROOTS = ("/data/savepoints/orders",)  # paths: under these, symlinks resolved
JOB_ENV = {  # options the pipeline reads: each value bounded
    "ORDERS_TABLES": env_pattern(r"^[a-z_]+(,[a-z_]+)*$"),
    "ORDERS_PARALLELISM": env_integer(1, 4),
}
PARAMS = {
    "pipeline": pipeline_param(PIPELINES[0], PIPELINES),
    "job_name": job_name_param("orders"),
    "source": connection_param("orders_db", CDC_CONNECTIONS),
    "job_env": job_env_param({"ORDERS_TABLES": "orders"}, JOB_ENV),
    "savepoint_dir": directory_param("where savepoints go", SAVEPOINT_ROOTS),
}

with DAG(dag_id="conf_choices", schedule=None, start_date=datetime(2026, 1, 1),
         render_template_as_native_obj=True, params=PARAMS):

    @task
    def check_conf(params=None) -> None:
        """Again in the worker, before anything starts: the author's schemas and roots."""
        check_run_params(params, PARAMS, {"savepoint_dir": SAVEPOINT_ROOTS})

    check_conf() >> SubmitCheckpointedJobOperator(
        task_id="start", pipeline="{{ params.pipeline }}", job_name="{{ params.job_name }}",
        savepoint_dir="{{ params.savepoint_dir }}",
        env_vars="{{ params.job_env }}", env_schema=JOB_ENV,
        env_from_connections={"ORDERS_DB_URL": "{{ params.source }}"},
        allowed_connections=CDC_CONNECTIONS)
# --8<-- [end:choices]
