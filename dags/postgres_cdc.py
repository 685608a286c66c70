"""Replicate PostgreSQL tables continuously (change data capture) and savepoint the job.

``start_cdc`` submits the CDC job detached (``restore="latest"``: a re-run resumes from the
newest checkpoint instead of taking a new snapshot) and succeeds at its first checkpoint.
The hourly runs then take a savepoint (XCom: its path) and check that the job is healthy:
the stability gate includes the replication lag (``max_replication_lag_s``: seconds behind
the source database, reported with every checkpoint; also the Prometheus gauges
``ckpt_replication_lag_bytes`` / ``_seconds`` and ``source_lag`` in ``ckpt checkpoints
--json``). ``drop_slot`` is left to a person: run ``DropCdcSlotOperator`` (or ``ckpt cdc
drop-slot``) only once the job is retired, or the next start takes a new snapshot.

The source database is an Airflow connection (``cdc_conn_id``: one of ``CDC_CONNECTIONS``,
the DAG author's list; default ``cdc_source``): the operator resolves its URI in the worker
and hands it to the job as ``$CKPT_CDC_URL`` in its environment. A run's conf never gives a
URL, a host or a directory; it may choose the connection among the listed ones and the
tables (``job_env``: ``CKPT_CDC_TABLES``).

The source database needs ``wal_level = logical`` and a role with ``REPLICATION`` (README,
"PostgreSQL change data capture").
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator
from airflow_checkpoint_provider.operators.stability import StabilityGateOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.params import (
    CDC_ENV,
    EXAMPLE_DEFAULT_ARGS,
    EXAMPLES,
    connection_param,
    job_env_param,
    job_name_param,
    pipeline_param,
)

# A DAG run's conf is untrusted: the pipelines, source connections and environment
# variables (with their bounds) it may choose, kept by the DAG author
PIPELINES = (f"{EXAMPLES}.postgres_cdc:build",)
CDC_CONNECTIONS = ("cdc_source",)
JOB_ENV = CDC_ENV

CONTROL_RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=5)}

with DAG(
    dag_id="postgres_cdc",
    default_args=EXAMPLE_DEFAULT_ARGS,
    description="PostgreSQL CDC job: submitted once, savepointed hourly, replication lag gated",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["checkpoint", "cdc"],
    render_template_as_native_obj=True,
    params={
        "pipeline": pipeline_param(PIPELINES[0], PIPELINES),
        "job_name": job_name_param("postgres-cdc"),
        "runner": Param("spark", enum=["spark", "local"]),
        "cdc_conn_id": connection_param(CDC_CONNECTIONS[0], CDC_CONNECTIONS,
                                        description="the source database's connection"),
        "job_env": job_env_param({"CKPT_CDC_TABLES": "orders"}, JOB_ENV),
        "max_lag_seconds": Param(60, type="number", minimum=0, maximum=86_400),
        "gate_window_s": Param(120, type="number", exclusiveMinimum=0, maximum=3_600),
    },
) as dag:
    start = SubmitCheckpointedJobOperator(
        task_id="start_cdc", pipeline="{{ params.pipeline }}", job_name="{{ params.job_name }}",
        runner="{{ params.runner }}", env_vars="{{ params.job_env }}", env_schema=JOB_ENV,
        env_from_connections={"CKPT_CDC_URL": "{{ params.cdc_conn_id }}"},
        allowed_connections=CDC_CONNECTIONS, restore="latest", wait_for="first_checkpoint")
    savepoint = TriggerSavepointOperator(
        task_id="savepoint", **CONTROL_RETRIES, job="{{ params.job_name }}", deferrable=True)
    gate = StabilityGateOperator(
        task_id="replication_lag", job="{{ params.job_name }}",
        window="{{ params.gate_window_s }}",
        max_replication_lag_s="{{ params.max_lag_seconds }}", min_throughput_ratio=None)

    start >> savepoint >> gate
