"""A team's own workflows for its orders job: the provider's blue-green upgrade, savepoint
upgrade and scheduled savepoints, called with the team's pipelines (``jobs.orders``, a module
of the team's, on the workers' path), fixed here.

A run's conf chooses only among what this file fixes: a pipeline by its key (``"v2"``, never
``"jobs.orders:build_v2"``), the job names listed, the connection ids listed, a savepoint
directory under the roots, and numbers within the workflow's bounds.
"""

from datetime import datetime

from airflow.sdk import DAG

from airflow_checkpoint_provider.params import env_integer
from airflow_checkpoint_provider.workflows import (
    ConnectionChoice,
    StabilityGate,
    blue_green_upgrade,
    savepoint_upgrade,
    scheduled_savepoints,
)

# --8<-- [start:choices]
PIPELINES = {"v1": "jobs.orders:build_v1", "v2": "jobs.orders:build_v2"}  # code: only these
ORDERS_DB = ConnectionChoice("ORDERS_DB_URL", ("orders_db",))  # the sinks' database
SAVEPOINT_ROOTS = ["/data/savepoints/orders"]  # paths: under these, symlinks resolved
JOB_ENV = {"ORDERS_PARALLELISM": env_integer(1, 4)}  # options the pipeline reads, bounded
# --8<-- [end:choices]

# --8<-- [start:blue-green]
with DAG("orders_blue_green", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         render_template_as_native_obj=True):
    blue_green_upgrade(
        pipelines=PIPELINES,
        job_names=("orders-blue", "orders-green"),  # blue and green take turns
        gate=StabilityGate(window_s=120, min_checkpoints=3),
        job_env=JOB_ENV, connections=[ORDERS_DB], savepoint_roots=SAVEPOINT_ROOTS,
        allowed_owner_dags=["orders_pipeline"])  # the DAG that started blue
# --8<-- [end:blue-green]

# --8<-- [start:upgrade]
with DAG("orders_upgrade", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         render_template_as_native_obj=True):
    savepoint_upgrade(
        pipelines=PIPELINES, job_name="orders",  # v1_pipeline "v1", v2_pipeline "v2"
        job_env=JOB_ENV, connections=[ORDERS_DB], savepoint_roots=SAVEPOINT_ROOTS,
        allowed_owner_dags=["orders_pipeline"], first_checkpoint_timeout_s=600)
# --8<-- [end:upgrade]

# --8<-- [start:savepoints]
with DAG("orders_savepoints", schedule="30 2 * * *", start_date=datetime(2026, 1, 1),
         catchup=False, max_active_runs=1, render_template_as_native_obj=True):
    scheduled_savepoints(job_name="orders", savepoint_roots=SAVEPOINT_ROOTS, max_count=14,
                         max_age_hours=24 * 14, allowed_owner_dags=["orders_pipeline"])
# --8<-- [end:savepoints]
