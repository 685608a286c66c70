"""The savepoint upgrade with its rollback path, for the DAG author's own pipelines.

check_conf -> pre-flight (the new version must restore a fresh savepoint of the running one)
-> stop the old version (``upgrade_mode``: with a savepoint, or last-state) -> start the new
version from that snapshot -> wait for its first completed checkpoint after the restore. If
the new version does not start or does not checkpoint in time: cancel it, remove what it
committed from its sinks (``guard_rollback``; refused, naming the sinks, when a sink cannot:
then the old version is not restarted, or with ``rollback_decision`` a person decides in a
HITL step) and restart the old version from the same snapshot; the run then ends failed.

With ``standby=True`` (savepoint mode only) the new version starts *first*, as a standby of
the running one (``restore="standby:JOB"``): ``start_v2`` returns once its application is up
and it only waits for the hand-over (``READY`` in the metadata DB), then ``stop_v1`` stops the
old version with a savepoint and the standby restores it at once -- the new version's start
is no longer part of the output gap. ``stop_v1`` stops the old version only while the standby
can still take over (``StopForUpgradeOperator(standby_job=...)``). A failed or refused stop
withdraws the waiting standby (``cancel_v2``) and the old version keeps running; a new
version that fails after the hand-over is rolled back as above. A standby that fails, or
whose process exits, fails the wait within a poll, naming it (see
:mod:`~airflow_checkpoint_provider.hooks.launcher` for what can be known from another host).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param, TaskGroup, TriggerRule

from airflow_checkpoint_provider.operators.control import CancelJobOperator
from airflow_checkpoint_provider.operators.rollback import GuardRollbackOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.operators.upgrade import UPGRADE_MODES, StopForUpgradeOperator
from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator
from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor
from airflow_checkpoint_provider.workflows.choices import (
    ConnectionChoice,
    Roots,
    add_params,
    check_conf_task,
    connection_params,
    current_dag,
    job_choice_param,
    job_env_choice,
    pipeline_choice_param,
    pipeline_choices,
    pipeline_env,
    pipeline_template,
    savepoint_dir_param,
    workflow_group,
)

#: Control tasks are idempotent (a retry waits for its earlier try's request): they retry
#: through Airflow's own faults, e.g. a deferral race that marks a finished try failed
#: (``404 Task Instance not found``), at once: a retry re-attaches, it asks nothing again,
#: and each second of delay on a stop or a cut-over is a second of output gap.
CONTROL_RETRIES: dict[str, Any] = {"retries": 2, "retry_delay": timedelta(seconds=1)}
RUNNERS = ("spark", "local")


def runner_param(default: str) -> Param:
    if default not in RUNNERS:
        raise ValueError(f"runner must be one of {RUNNERS}, not {default!r}")
    return Param(default, enum=list(RUNNERS), description="spark-submit, or the local runner")


def savepoint_upgrade(
    *,
    pipelines: Mapping[str, str] | Sequence[str],
    job_name: str,
    job_names: Sequence[str] = (),
    any_job_name: bool = False,
    old: str | None = None,
    new: str | None = None,
    job_env: Mapping[str, Mapping[str, Any]] | None = None,
    connections: Sequence[ConnectionChoice] = (),
    savepoint_roots: Roots | None = None,
    allowed_owner_dags: Iterable[str] | None = None,
    runner: str = "spark",
    upgrade_mode: str = "savepoint",
    first_checkpoint_timeout_s: float = 300,
    standby: bool = False,
    submit_kwargs: Mapping[str, Any] | None = None,
    group_id: str = "savepoint_upgrade",
    dag: DAG | None = None,
) -> TaskGroup:
    """Add the savepoint upgrade (with its rollback path) to the current DAG.

    Its tasks: ``check_conf``, ``preflight``, ``stop_v1``, ``start_v2``,
    ``wait_v2_checkpoint``, ``upgraded``; on failure ``cancel_v2``, ``guard_rollback``,
    ``ask_rollback``, ``decide_rollback``, ``rollback_ok``, ``restart_v1``. Its params (what
    a run's conf may choose): ``job_name``, ``v1_pipeline`` and ``v2_pipeline`` (keys of
    ``pipelines``), ``savepoint_dir``, ``runner``, ``job_env``, one per connection,
    ``upgrade_mode``, ``max_checkpoint_age_s``, ``rollback_decision``.

    :param pipelines: ``{key: "module:function"}`` (or a list of references, each its own
        key): the versions a run may choose between, by key.
    :param job_name: the job to upgrade (the param's default).
    :param job_names: the job names a run may choose (default: only ``job_name``).
    :param any_job_name: a run may name any job (it must still belong to this DAG or to one
        of ``allowed_owner_dags``, or to none: started outside Airflow).
    :param old: key of the running version (default: the first key).
    :param new: key of the new version (default: the last key).
    :param job_env: ``{variable: JSON schema}`` of the options a run may set
        (:func:`~airflow_checkpoint_provider.params.env_integer`, ...); default none.
    :param connections: :class:`ConnectionChoice` per variable holding a connection's URI.
    :param savepoint_roots: where a run may put savepoints (absolute paths, or a callable
        read in the worker); default none: the job's own savepoint directory.
    :param allowed_owner_dags: DAGs whose jobs these tasks may act on besides this DAG's.
    :param runner: the ``runner`` param's default (``spark`` or ``local``).
    :param upgrade_mode: the ``upgrade_mode`` param's default.
    :param first_checkpoint_timeout_s: the new version must complete a checkpoint within
        this, else it is rolled back.
    :param standby: start the new version as a standby before the old one stops (see the
        module docstring); savepoint mode only (the ``upgrade_mode`` param then offers only
        ``savepoint``: a last-state hand-over's age limit and fallbacks are decided by
        ``stop_v1`` after the old version ended, too late for a standby that restores at
        once).
    :param submit_kwargs: more arguments of the submit tasks, fixed here
        (``spark_conn_id``, ``conf``, ``ship_code``, ...).
    :param group_id: the TaskGroup's id (task ids are not prefixed).
    :param dag: the DAG (default: the one of the ``with DAG(...)`` block).
    :return: the TaskGroup (``upstream >> group``, ``group >> downstream``).
    """
    dag = current_dag(dag, "savepoint_upgrade")
    choices = pipeline_choices(pipelines)
    env_param, env_schema = job_env_choice(job_env)
    dir_param, roots = savepoint_dir_param(savepoint_roots)
    if upgrade_mode not in UPGRADE_MODES:
        raise ValueError(f"upgrade_mode must be one of {UPGRADE_MODES}, not {upgrade_mode!r}")
    if standby and upgrade_mode != "savepoint":
        raise ValueError("standby=True needs upgrade_mode='savepoint' (the standby restores "
                         f"as soon as the old version ended), not {upgrade_mode!r}")
    modes = ["savepoint"] if standby else list(UPGRADE_MODES)
    params: dict[str, Param] = {
        "job_name": job_choice_param(job_name, list(job_names) or [job_name], any_job_name,
                                     "job to upgrade"),
        "v1_pipeline": pipeline_choice_param(choices, old, "the running version"),
        "v2_pipeline": pipeline_choice_param(choices, new or list(choices)[-1],
                                             "the new version"),
        "savepoint_dir": dir_param,
        "runner": runner_param(runner),
        "job_env": env_param,
        "upgrade_mode": Param(upgrade_mode, enum=modes,
                              description="how v1 hands its state over"),
        "max_checkpoint_age_s": Param(None, type=["null", "number"], minimum=0,
                                      maximum=7 * 86_400,
                                      description="last-state: refuse an older checkpoint"),
        "rollback_decision": Param(False, type="boolean",
                                   description="when the rollback guard refuses (a sink cannot "
                                               "remove v2's output), a person decides: restart "
                                               "v1 anyway, or keep it stopped (HITL)"),
    }
    params.update(connection_params(connections, params))
    add_params(dag, params, "savepoint_upgrade")
    env = pipeline_env(env_schema, connections)
    submit = {"runner": "{{ params.runner }}", **env, **(submit_kwargs or {})}
    v1, v2 = pipeline_template(choices, "v1_pipeline"), pipeline_template(choices, "v2_pipeline")
    snapshot = "{{ ti.xcom_pull(task_ids='stop_v1') }}"
    v2_job_id = "{{ ti.xcom_pull(task_ids='start_v2', key='job_id') }}"

    with workflow_group(dag, group_id, "savepoint -> upgrade -> restore, rollback on failure",
                        allowed_owner_dags) as group:
        check_conf = check_conf_task(params, {"savepoint_dir": roots})
        preflight = VerifyRestoreOperator(
            task_id="preflight", pipeline=v2, job_name="{{ params.job_name }}",
            take_savepoint=True, **env)
        stop_v1 = StopForUpgradeOperator(
            task_id="stop_v1", **CONTROL_RETRIES, job="{{ params.job_name }}",
            directory="{{ params.savepoint_dir }}", upgrade_mode="{{ params.upgrade_mode }}",
            max_checkpoint_age="{{ params.max_checkpoint_age_s }}", deferrable=True,
            # v1 stops only while the standby is still there to take over
            standby_job=v2_job_id if standby else None)
        if standby:  # up before v1 stops; it restores v1's stop savepoint at once
            start_v2 = SubmitCheckpointedJobOperator(
                task_id="start_v2", pipeline=v2, job_name="{{ params.job_name }}",
                restore="standby:{{ params.job_name }}", wait_for="standby_ready",
                deferrable=True, **submit)
        else:
            start_v2 = SubmitCheckpointedJobOperator(
                task_id="start_v2", pipeline=v2, job_name="{{ params.job_name }}",
                restore=snapshot, wait_for="running", **submit)
        # retried: each try decides on the metadata DB first (a lost deferral never rolls back)
        wait_v2 = CheckpointCompletedSensor(
            task_id="wait_v2_checkpoint", **CONTROL_RETRIES, job=v2_job_id, after_restore=True,
            deferrable=True, poke_interval=1, timeout=first_checkpoint_timeout_s)
        upgraded = EmptyOperator(task_id="upgraded")

        cancel_v2 = CancelJobOperator(
            task_id="cancel_v2", **CONTROL_RETRIES, job=v2_job_id, missing_ok=True,
            trigger_rule=TriggerRule.ONE_FAILED)
        # v2 committed output (a checkpoint, or it ran to its end): its sinks remove it, or
        # the rollback is refused naming the sinks that cannot (nothing is published twice)
        guard_rollback = GuardRollbackOperator(
            task_id="guard_rollback", **CONTROL_RETRIES, job=v2_job_id, pipeline=v2, **env)
        restart_v1 = SubmitCheckpointedJobOperator(
            task_id="restart_v1", pipeline=v1, job_name="{{ params.job_name }}",
            restore=snapshot, wait_for="running", **submit)

        # the guard refused: with rollback_decision a person decides in Airflow's Required
        # Actions view (Approve: restart v1 anyway, republishing v2's output to the sinks the
        # guard named; Reject: v1 stays stopped); without it v1 stays stopped
        ask_rollback = ShortCircuitOperator(
            task_id="ask_rollback", trigger_rule=TriggerRule.ALL_FAILED,
            python_callable=lambda params: bool(params["rollback_decision"]))
        decide_rollback = ApprovalOperator(
            task_id="decide_rollback",
            subject="Rollback of {{ params.job_name }} refused: restart v1 anyway?",
            body="The rollback guard refused: {{ ti.xcom_pull(task_ids='guard_rollback', "
                 "key='refusal') }}. Approve restarts v1 from {{ ti.xcom_pull(task_ids='stop_v1') "
                 "}} anyway: those sinks receive v2's committed records again. Reject keeps v1 "
                 "stopped (v2's output stays) until you act.",
            fail_on_reject=True, response_timeout=timedelta(hours=24))
        rollback_ok = EmptyOperator(task_id="rollback_ok", trigger_rule=TriggerRule.ONE_SUCCESS)
        if standby:  # a failed stop withdraws the waiting standby (v1 keeps running)
            check_conf >> preflight >> start_v2 >> stop_v1 >> wait_v2 >> upgraded
            [start_v2, stop_v1, wait_v2] >> cancel_v2
        else:
            check_conf >> preflight >> stop_v1 >> start_v2 >> wait_v2 >> upgraded
            [start_v2, wait_v2] >> cancel_v2
        cancel_v2 >> guard_rollback >> rollback_ok >> restart_v1
        guard_rollback >> ask_rollback >> decide_rollback >> rollback_ok
        stop_v1 >> restart_v1  # no rollback without the snapshot
    return group
