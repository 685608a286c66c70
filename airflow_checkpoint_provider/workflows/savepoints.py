"""Scheduled savepoints with retention, for the DAG author's own job.

check_conf -> a savepoint of the running job (its path is the task's XCom, and an asset
event of ``checkpoint://<job_name>/savepoints``) -> retention: savepoints older than
``max_age_hours`` or beyond the newest ``max_count`` are disposed; the newest one, any a
running job was restored from and any pinned one are always kept (XCom ``retention_report``
says, per savepoint, what it did and why). The schedule and the deadline are the DAG's
(``DAG(schedule=..., deadline=savepoint_deadline(...))``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from airflow.sdk import DAG, Param, TaskGroup

from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator
from airflow_checkpoint_provider.operators.savepoints import DisposeSavepointsOperator
from airflow_checkpoint_provider.workflows.choices import (
    Roots,
    add_params,
    check_conf_task,
    current_dag,
    job_choice_param,
    savepoint_dir_param,
    workflow_group,
)
from airflow_checkpoint_provider.workflows.upgrade import CONTROL_RETRIES


def scheduled_savepoints(
    *,
    job_name: str,
    job_names: Sequence[str] = (),
    any_job_name: bool = False,
    savepoint_roots: Roots | None = None,
    max_count: int = 24,
    max_age_hours: float = 72,
    allowed_owner_dags: Iterable[str] | None = None,
    group_id: str = "scheduled_savepoints",
    dag: DAG | None = None,
) -> TaskGroup:
    """Add a savepoint with retention to the current DAG (give the DAG a ``schedule``).

    Its tasks: ``check_conf``, ``savepoint``, ``retention``. Its params: ``job_name``,
    ``savepoint_dir``, ``max_count`` (1-1000) and ``max_age_hours`` (0-8784).

    :param job_name: the job to save (the param's default).
    :param job_names: the job names a run may choose (default: only ``job_name``).
    :param any_job_name: a run may name any job (it must still belong to this DAG or to one
        of ``allowed_owner_dags``, or to none: started outside Airflow).
    :param savepoint_roots: where a run may put savepoints (absolute paths, or a callable
        read in the worker); default none: the job's own savepoint directory.
    :param max_count: keep at most this many savepoints (the param's default).
    :param max_age_hours: dispose savepoints older than this (the param's default).
    :param allowed_owner_dags: DAGs whose jobs these tasks may act on besides this DAG's
        (e.g. the DAG that started the job).
    :param group_id: the TaskGroup's id (task ids are not prefixed).
    :param dag: the DAG (default: the one of the ``with DAG(...)`` block).
    :return: the TaskGroup.
    """
    dag = current_dag(dag, "scheduled_savepoints")
    dir_param, roots = savepoint_dir_param(savepoint_roots)
    params = {
        "job_name": job_choice_param(job_name, list(job_names) or [job_name], any_job_name,
                                     "job to save"),
        "savepoint_dir": dir_param,
        "max_count": Param(max_count, type="integer", minimum=1, maximum=1_000),
        "max_age_hours": Param(max_age_hours, type="number", minimum=0, maximum=24 * 366),
    }
    add_params(dag, params, "scheduled_savepoints")
    with workflow_group(dag, group_id, "savepoint, then retention",
                        allowed_owner_dags) as group:
        check_conf = check_conf_task(params, {"savepoint_dir": roots})
        savepoint = TriggerSavepointOperator(
            task_id="savepoint", **CONTROL_RETRIES, job="{{ params.job_name }}",
            directory="{{ params.savepoint_dir }}", deferrable=True)
        retention = DisposeSavepointsOperator(
            task_id="retention", job_name="{{ params.job_name }}",
            max_count="{{ params.max_count }}",
            max_age_seconds="{{ params.max_age_hours * 3600 }}")
        check_conf >> savepoint >> retention
    return group
