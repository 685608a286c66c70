"""The upgrade, blue-green and scheduled-savepoint workflows as a library.

A DAG author calls one of these inside ``with DAG(...)`` with their own pipelines, fixed in
the DAG file; a run's conf only chooses among them (by key), among the author's job names
and connection ids, a directory under the author's roots and bounded numbers::

    with DAG("orders_blue_green", schedule=None, render_template_as_native_obj=True):
        blue_green_upgrade(
            pipelines={"v1": "jobs.orders:build_v1", "v2": "jobs.orders:build_v2"},
            job_names=("orders-blue", "orders-green"),
            gate=StabilityGate(window_s=120, min_checkpoints=3),
            connections=[ConnectionChoice("ORDERS_DB_URL", ("orders_db",))],
            savepoint_roots=["/data/savepoints/orders"],
            allowed_owner_dags=["orders_pipeline"])

Each function adds the workflow's params to the DAG and its tasks in a TaskGroup (returned;
task ids not prefixed) and keeps every rule of :mod:`airflow_checkpoint_provider.params` and
:mod:`airflow_checkpoint_provider.ownership`.
"""

from __future__ import annotations

from airflow_checkpoint_provider.workflows.blue_green import StabilityGate, blue_green_upgrade
from airflow_checkpoint_provider.workflows.choices import (
    ConnectionChoice,
    WorkflowDefinitionError,
)
from airflow_checkpoint_provider.workflows.savepoints import scheduled_savepoints
from airflow_checkpoint_provider.workflows.upgrade import savepoint_upgrade

__all__ = ["ConnectionChoice", "StabilityGate", "WorkflowDefinitionError",
           "blue_green_upgrade", "savepoint_upgrade", "scheduled_savepoints"]
