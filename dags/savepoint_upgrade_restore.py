"""Upgrade a running job, with a pre-flight restore check and a rollback.

pre-flight: v2 must restore a fresh savepoint of v1 (v1 keeps running; if v1 cannot take one,
its latest checkpoint) (``ckpt verify-restore``: uids, state kinds and serializers, each
operator opened on a sample of its state), else the run fails naming the operator and
state, before v1 is stopped -> stop v1 in the chosen upgrade mode
(``savepoint``: stop with a savepoint; ``last-state``: cancel, hand over the latest
completed checkpoint unless older than ``max_checkpoint_age_s``;
``savepoint-or-last-state``: a savepoint, or last-state when v1 is unhealthy or the
savepoint fails) -> start v2 restoring from it -> wait for v2's first completed checkpoint
after the restore. If v2 does not start or does not checkpoint in time, cancel v2 (if it
runs), remove what v2 committed from its sinks (``guard_rollback``; refused, naming the
sinks, when a sink cannot: then v1 is not restarted; with ``rollback_decision`` a person
decides in a HITL step, ``decide_rollback``, whether to restart it anyway) and restart v1
from the same snapshot; the run then ends failed (task ``upgraded`` is upstream_failed) so
the failed upgrade is visible, with v1 running again.

Trigger with a conf such as ``{"job_name": "orders", "v2_pipeline": "jobs.orders:build_v2"}``.

A run's conf chooses among what this file fixes: pipelines (``PIPELINES``), the job name,
modes, bounded numbers, the pipelines' options within ``JOB_ENV``'s bounds, and a savepoint
directory under ``SAVEPOINT_ROOTS`` (the example's ``$CKPT_EXAMPLE_DIR/savepoints`` and the
deployment's ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``, read in the worker; empty: the job's own).
Task ``check_conf`` checks it all again in the worker, symlinks resolved, before v1 is
touched. No URL and no job directory: ``$CKPT_EXAMPLE_DIR`` and ``$CKPT_EXAMPLE_PG_URL`` are
the worker's environment, the same for every task of the run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param, TriggerRule, task

from airflow_checkpoint_provider.operators.control import CancelJobOperator
from airflow_checkpoint_provider.operators.rollback import GuardRollbackOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.operators.upgrade import UPGRADE_MODES, StopForUpgradeOperator
from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator
from airflow_checkpoint_provider.params import (
    EXAMPLE_DEFAULT_ARGS,
    EXAMPLE_ENV,
    check_run_params,
    directory_param,
    example_pipeline_env,
    example_savepoint_roots,
    job_env_param,
    job_name_param,
    pipeline_param,
    sink_connection_param,
)
from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
# A DAG run's conf is untrusted: the pipelines (v1 and v2) and environment variables it may
# choose, kept by the DAG author
PIPELINES = tuple(f"{EXAMPLE}:{f}" for f in (
    "build_v1", "build_v2", "build_v2_broken", "build_v2_incompatible", "build_v2_slow",
    "build_v2_flaky"))
JOB_ENV = EXAMPLE_ENV
# where a run's conf may put savepoints: read in the worker (example_savepoint_roots:
# $CKPT_EXAMPLE_DIR/savepoints and $CKPT_ALLOWED_SAVEPOINT_ROOTS), checked by check_conf
SAVEPOINT_ROOTS = example_savepoint_roots
SNAPSHOT = "{{ ti.xcom_pull(task_ids='stop_v1') }}"
V2_JOB_ID = "{{ ti.xcom_pull(task_ids='start_v2', key='job_id') }}"
FIRST_CHECKPOINT_TIMEOUT_S = 300  # v2 must complete a checkpoint within this, else roll back

# Control tasks are idempotent (a retry waits for its earlier try's request): retry them
# through Airflow's own faults, e.g. a deferral race that marks a finished try failed.
CONTROL_RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=5)}
#: how every task that builds or runs the pipeline gets its environment
PIPELINE_ENV = example_pipeline_env(JOB_ENV)

PARAMS = {
    "job_name": job_name_param("versioned-sum", description="job to upgrade"),
    "v1_pipeline": pipeline_param(f"{EXAMPLE}:build_v1", PIPELINES),
    "v2_pipeline": pipeline_param(f"{EXAMPLE}:build_v2", PIPELINES),
    "savepoint_dir": directory_param("savepoint directory (empty: the job's own)"),
    "runner": Param("spark", enum=["spark", "local"]),
    "job_env": job_env_param({}, JOB_ENV),
    "sink_conn_id": sink_connection_param(),
    "upgrade_mode": Param("savepoint", enum=list(UPGRADE_MODES),
                          description="how v1 hands its state over"),
    "max_checkpoint_age_s": Param(None, type=["null", "number"], minimum=0,
                                  maximum=7 * 86_400,
                                  description="last-state: refuse an older checkpoint"),
    "rollback_decision": Param(False, type="boolean",
                               description="when the rollback guard refuses (a sink cannot "
                                           "remove v2's output), a person decides: restart "
                                           "v1 anyway, or keep it stopped (HITL)"),
}

with DAG(
    dag_id="savepoint_upgrade_restore",
    default_args=EXAMPLE_DEFAULT_ARGS,
    description="stop v1 with a savepoint, start v2 from it, roll back to v1 on failure",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint", "upgrade"],
    render_template_as_native_obj=True,
    params=PARAMS,
) as dag:

    @task(task_id="check_conf")
    def check_conf(params=None) -> None:
        """The run's params against this file's schemas and roots (symlinks resolved),
        before anything starts: a refusal names the param, the value and the rule."""
        check_run_params(params, PARAMS, {"savepoint_dir": SAVEPOINT_ROOTS})

    preflight = VerifyRestoreOperator(
        task_id="preflight", pipeline="{{ params.v2_pipeline }}", job_name="{{ params.job_name }}",
        take_savepoint=True, **PIPELINE_ENV)
    stop_v1 = StopForUpgradeOperator(
        task_id="stop_v1", **CONTROL_RETRIES, job="{{ params.job_name }}",
        directory="{{ params.savepoint_dir }}", upgrade_mode="{{ params.upgrade_mode }}",
        max_checkpoint_age="{{ params.max_checkpoint_age_s }}", deferrable=True)
    start_v2 = SubmitCheckpointedJobOperator(
        task_id="start_v2", pipeline="{{ params.v2_pipeline }}", job_name="{{ params.job_name }}",
        restore=SNAPSHOT, wait_for="running", runner="{{ params.runner }}",
        **PIPELINE_ENV)
    # retried: each try decides on the metadata DB first (a lost deferral never rolls back)
    wait_v2 = CheckpointCompletedSensor(
        task_id="wait_v2_checkpoint", **CONTROL_RETRIES, job=V2_JOB_ID, after_restore=True,
        deferrable=True, poke_interval=1, timeout=FIRST_CHECKPOINT_TIMEOUT_S)
    upgraded = EmptyOperator(task_id="upgraded")

    cancel_v2 = CancelJobOperator(
        task_id="cancel_v2", **CONTROL_RETRIES, job=V2_JOB_ID, missing_ok=True, trigger_rule=TriggerRule.ONE_FAILED)
    # v2 committed output (a checkpoint, or it ran to its end): its sinks remove it, or the
    # rollback is refused naming the sinks that cannot (nothing is published twice)
    guard_rollback = GuardRollbackOperator(
        task_id="guard_rollback", **CONTROL_RETRIES, job=V2_JOB_ID,
        pipeline="{{ params.v2_pipeline }}", **PIPELINE_ENV)
    restart_v1 = SubmitCheckpointedJobOperator(
        task_id="restart_v1", pipeline="{{ params.v1_pipeline }}",
        job_name="{{ params.job_name }}", restore=SNAPSHOT, wait_for="running",
        runner="{{ params.runner }}", **PIPELINE_ENV)

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
             "key='refusal') }}. Approve restarts v1 from {{ ti.xcom_pull(task_ids='stop_v1') }}"
             " anyway: those sinks receive v2's committed records again. Reject keeps v1 "
             "stopped (v2's output stays) until you act.",
        fail_on_reject=True, response_timeout=timedelta(hours=24))
    rollback_ok = EmptyOperator(task_id="rollback_ok", trigger_rule=TriggerRule.ONE_SUCCESS)
    check_conf() >> preflight >> stop_v1 >> start_v2 >> wait_v2 >> upgraded
    [start_v2, wait_v2] >> cancel_v2 >> guard_rollback >> rollback_ok >> restart_v1
    guard_rollback >> ask_rollback >> decide_rollback >> rollback_ok
    stop_v1 >> restart_v1  # no rollback without the snapshot
