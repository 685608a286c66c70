"""Blue-green upgrade: run the new version (green) next to the old one (blue) first.

(a CDC pipeline: green's own replication slot, copied from blue's: ``copy_cdc_slots``) ->
hand-over snapshot of blue (``handover``: a fresh savepoint, or blue's latest completed
checkpoint for ``last-state``) -> pre-flight: green's pipeline must restore it (``ckpt
verify-restore``), else the run fails naming the operator and state -> start green from it
-> stability gate: over ``gate_window_s`` seconds green stays RUNNING without restarts,
completes at least ``min_checkpoints`` checkpoints (each within
``max_checkpoint_duration_ms``), processes at least ``min_throughput_ratio`` of blue's
records per second in every operator, and neither its watermark lag nor its backlog grows
beyond a bound; the verdict with its figures is in the task log and XCom ``verdict`` ->
optional human approval (``require_approval``: an Airflow HITL ``ApprovalOperator`` in the
Required Actions view; "Reject" abandons the upgrade) -> cut-over.

Exactly-once (``exactly_once``, the default): green runs *fenced* until the cut-over: it
checkpoints and pre-commits on live data but its sinks publish nothing. At the cut-over blue
stops (``cutover``: with a savepoint, or ``last-state``: cancelled, its latest checkpoint
handed over), and green restores blue's final snapshot *in place* (``in_place``, the default: task ``promote_green`` sends
it a ``PROMOTE`` request; its running application stops the fenced attempt, discards what
it staged, restores the snapshot on the same executors and publishes; no new spark-submit).
The promotion checks the snapshot itself (signature, fencing, checksums, every source's
and sink's consent), and green already restored blue's earlier savepoint of the same state
layout. If green cannot be promoted (it refused the snapshot, or it is not running) the old
path runs: the pre-flight check runs on blue's final snapshot (``preflight_final``), the
fenced green ends (``end_validation``) and is submitted again unfenced from it
(``go_live``). Either way its first published epoch starts exactly
where blue's last committed one ended: no record is published by both, none by neither.
The price: the cut-over takes an attempt restart (in place) or a job start (old path) of
output latency. With ``exactly_once`` off green publishes from its start (both jobs write
while they overlap: at-least-once, as in Flink's blue-green deployments).

If the pre-flight check, the gate or the approval fails, green is cancelled (if it runs) and
blue keeps running untouched (task ``keep_blue`` says so in its log); the run ends failed.
A failed cut-over (``stop_blue``, ``preflight_final`` or ``end_validation``) cancels green
too: no failure path leaves the validation run running (``keep_blue`` then fails if blue
is not RUNNING any more, e.g. a last-state cut-over that cancelled it, and names
blue's latest snapshot to restart it from).

Blue and green must have different job names (each name has at most one running job).

A run's conf chooses among what this file fixes: green's pipeline (``PIPELINES``), job
names, modes, bounded numbers, the pipelines' options within ``JOB_ENV``'s bounds, and a
savepoint directory under ``SAVEPOINT_ROOTS`` (the example's ``$CKPT_EXAMPLE_DIR/savepoints``
and the deployment's ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``, read in the worker; empty: the job's
own). Task ``check_conf`` checks all of it again in the worker before anything starts
(symlinks resolved). It never names a URL or a directory of the job: the CDC source
(``$CKPT_CDC_URL``), the PostgreSQL sink (``$CKPT_EXAMPLE_PG_URL``) and
``$CKPT_EXAMPLE_DIR`` are the worker's environment, the same for every task of the run.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param, TriggerRule, task

from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.operators.cdc import CopyCdcSlotsOperator
from airflow_checkpoint_provider.operators.control import (
    CancelJobOperator,
)
from airflow_checkpoint_provider.operators.promote import PromoteInPlaceOperator
from airflow_checkpoint_provider.operators.stability import StabilityGateOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.operators.upgrade import (
    HandoverSnapshotOperator,
    StopForUpgradeOperator,
)
from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator
from airflow_checkpoint_provider.params import (
    CDC_ENV,
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

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
# A DAG run's conf is untrusted: the green pipelines, environment variables (with their
# bounds) and savepoint roots it may choose, kept by the DAG author
PIPELINES = (*(f"{EXAMPLE}:{f}" for f in (
    "build_v1", "build_v2", "build_v2_broken", "build_v2_incompatible", "build_v2_slow",
    "build_v2_flaky")), "airflow_checkpoint_provider.examples.postgres_cdc:build")
JOB_ENV = {**EXAMPLE_ENV, **CDC_ENV}
# where a run's conf may put savepoints: read in the worker (example_savepoint_roots:
# $CKPT_EXAMPLE_DIR/savepoints and $CKPT_ALLOWED_SAVEPOINT_ROOTS), checked by check_conf
SAVEPOINT_ROOTS = example_savepoint_roots
GREEN_JOB_ID = "{{ ti.xcom_pull(task_ids='start_green', key='job_id') }}"

# Control tasks are idempotent (a retry waits for its earlier try's request): retry them
# through Airflow's own faults, e.g. a deferral race that marks a finished try failed.
CONTROL_RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=5)}
#: how every task that builds or runs the pipeline gets its environment
PIPELINE_ENV = example_pipeline_env(JOB_ENV)

PARAMS = {
    "blue_job": job_name_param("versioned-sum-blue"),
    "green_job": job_name_param("versioned-sum-green"),
    "green_pipeline": pipeline_param(f"{EXAMPLE}:build_v2", PIPELINES),
    "savepoint_dir": directory_param("savepoint directory (empty: the job's own)"),
    "runner": Param("spark", enum=["spark", "local"]),
    "exactly_once": Param(True, type="boolean",
                          description="green runs fenced until the cut-over, then restarts "
                                      "from blue's final snapshot (no duplicates)"),
    "handover": Param("savepoint", enum=["savepoint", "last-state"],
                      description="what green is validated from: a savepoint of blue or "
                                  "blue's latest completed checkpoint"),
    "cutover": Param("savepoint", enum=["savepoint", "last-state",
                                        "savepoint-or-last-state"],
                     description="how blue stops at the cut-over (upgrade mode)"),
    "max_checkpoint_age_s": Param(None, type=["null", "number"], minimum=0,
                                  maximum=7 * 86_400,
                                  description="last-state refuses older checkpoints"),
    "in_place": Param(True, type="boolean",
                      description="exactly-once cut-over: the fenced green restores blue's "
                                  "final snapshot in its running application (PROMOTE); "
                                  "off, or if that is refused: cancel and submit again"),
    "require_approval": Param(False, type="boolean",
                              description="a human approves the cut-over (HITL)"),
    "job_env": job_env_param({}, JOB_ENV, description="environment of the green job"),
    "sink_conn_id": sink_connection_param(),
    "gate_window_s": Param(60, type="number", exclusiveMinimum=0, maximum=3_600,
                           description="seconds green is watched"),
    "min_checkpoints": Param(3, type="integer", minimum=1, maximum=100),
    "max_restarts": Param(0, type="integer", minimum=0, maximum=100),
    "max_checkpoint_duration_ms": Param(None, type=["null", "number"], exclusiveMinimum=0,
                                        maximum=3_600_000),
    "min_throughput_ratio": Param(0.8, type=["null", "number"], minimum=0, maximum=10,
                                  description="green's records/s over blue's, per operator"),
    "max_watermark_lag_growth_ms": Param(None, type=["null", "number"], minimum=0,
                                         maximum=3_600_000),
    "max_backlog_growth_ms": Param(None, type=["null", "number"], minimum=0,
                                   maximum=3_600_000),
}

with DAG(
    dag_id="blue_green_upgrade",
    default_args=EXAMPLE_DEFAULT_ARGS,
    description="start green from blue's savepoint, promote it only if it is healthy",
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

    # a CDC pipeline: green's own replication slot, a copy of blue's made before the
    # hand-over snapshot (so it holds every change after it); a no-op without a CDC source
    copy_cdc_slots = CopyCdcSlotsOperator(
        task_id="copy_cdc_slots", **CONTROL_RETRIES, pipeline="{{ params.green_pipeline }}",
        blue_job="{{ params.blue_job }}", green_job="{{ params.green_job }}",
        **PIPELINE_ENV)
    savepoint_blue = HandoverSnapshotOperator(
        task_id="savepoint_blue", **CONTROL_RETRIES, job="{{ params.blue_job }}",
        handover="{{ params.handover }}", max_checkpoint_age="{{ params.max_checkpoint_age_s }}",
        directory="{{ params.savepoint_dir }}", deferrable=True)
    preflight = VerifyRestoreOperator(
        task_id="preflight", pipeline="{{ params.green_pipeline }}",
        snapshot="{{ ti.xcom_pull(task_ids='savepoint_blue') }}", **PIPELINE_ENV,
        fence_sinks="{{ params.exactly_once }}")  # a sink fenced mode refuses: before any start
    start_green = SubmitCheckpointedJobOperator(
        task_id="start_green", pipeline="{{ params.green_pipeline }}",
        job_name="{{ params.green_job }}", fence_sinks="{{ params.exactly_once }}",
        restore="{{ ti.xcom_pull(task_ids='savepoint_blue') }}", wait_for="running",
        runner="{{ params.runner }}", **PIPELINE_ENV)
    health_gate = StabilityGateOperator(
        task_id="health_gate", job=GREEN_JOB_ID, baseline_job="{{ params.blue_job }}",
        window="{{ params.gate_window_s }}", min_checkpoints="{{ params.min_checkpoints }}",
        max_restarts="{{ params.max_restarts }}",
        max_checkpoint_duration_ms="{{ params.max_checkpoint_duration_ms }}",
        min_throughput_ratio="{{ params.min_throughput_ratio }}",
        max_watermark_lag_growth_ms="{{ params.max_watermark_lag_growth_ms }}",
        max_backlog_growth_ms="{{ params.max_backlog_growth_ms }}", deferrable=True)

    @task.branch(task_id="approval")
    def approval(params=None) -> str:
        return "approve" if params["require_approval"] else "no_approval_needed"

    approve = ApprovalOperator(
        task_id="approve", subject="Promote {{ params.green_job }} over {{ params.blue_job }}?",
        body="Green passed the stability gate: {{ ti.xcom_pull(task_ids='health_gate') }}. "
             "Approve stops blue and cuts over; Reject cancels green, blue keeps serving.",
        # a rejection abandons the upgrade like a failed gate: green cancelled, run failed
        fail_on_reject=True, response_timeout=timedelta(hours=24))
    no_approval_needed = EmptyOperator(task_id="no_approval_needed")
    stop_blue = StopForUpgradeOperator(
        task_id="stop_blue", **CONTROL_RETRIES, job="{{ params.blue_job }}",
        upgrade_mode="{{ params.cutover }}", max_checkpoint_age="{{ params.max_checkpoint_age_s }}",
        directory="{{ params.savepoint_dir }}", deferrable=True,
        trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    # exactly-once: the fenced green ends, green restarts unfenced from blue's final snapshot
    fenced = ShortCircuitOperator(task_id="fenced_cutover",
                                  python_callable=lambda params: bool(params["exactly_once"]))
    preflight_final = VerifyRestoreOperator(
        task_id="preflight_final", pipeline="{{ params.green_pipeline }}",
        snapshot="{{ ti.xcom_pull(task_ids='stop_blue') }}", **PIPELINE_ENV)
    promote_green = PromoteInPlaceOperator(
        task_id="promote_green", **CONTROL_RETRIES, job=GREEN_JOB_ID,
        snapshot="{{ ti.xcom_pull(task_ids='stop_blue') }}", enabled="{{ params.in_place }}",
        deferrable=True)
    # the old path only when green was not promoted in place (skips end_validation, go_live)
    needs_resubmit = ShortCircuitOperator(
        task_id="needs_resubmit", ignore_downstream_trigger_rules=False,
        python_callable=lambda ti: not ti.xcom_pull(task_ids="promote_green"))
    end_validation = CancelJobOperator(
        task_id="end_validation", **CONTROL_RETRIES, job=GREEN_JOB_ID, missing_ok=True)
    go_live = SubmitCheckpointedJobOperator(
        task_id="go_live", pipeline="{{ params.green_pipeline }}",
        job_name="{{ params.green_job }}", restore="{{ ti.xcom_pull(task_ids='stop_blue') }}",
        wait_for="running", runner="{{ params.runner }}", **PIPELINE_ENV,
        # never attach to the fenced green by name; its own earlier tries are re-attached to
        reconnect=False, retries=2, retry_delay=timedelta(seconds=5))

    cancel_green = CancelJobOperator(
        task_id="cancel_green", **CONTROL_RETRIES, job=GREEN_JOB_ID, missing_ok=True,
        trigger_rule=TriggerRule.ONE_FAILED)

    @task(task_id="keep_blue")
    def keep_blue(params=None, ti=None) -> str:
        """Say what happened: green cancelled (or never ran), blue untouched and running."""
        hook = CheckpointMetadataHook()
        blue = hook.resolve_job(params["blue_job"])
        green_id = ti.xcom_pull(task_ids="start_green", key="job_id")
        green = hook.find_job(green_id) if green_id else None
        green_said = (f"{green.job_name} ({green.job_id}) is {green.status}"
                      + (f": {green.failure_reason}" if green.failure_reason else "")
                      if green else "never started")
        if blue.status == "RUNNING":
            logging.getLogger(__name__).warning(
                "Upgrade abandoned: green %s; blue %s (%s) keeps running", green_said,
                blue.job_name, blue.job_id)
            return blue.job_id
        # blue ended (e.g. the cut-over stopped it, then failed): say where to restart from
        latest = hook.get_conn().latest_completed_checkpoint(job_id=blue.job_id, kind=None)
        raise RuntimeError(
            f"Upgrade abandoned: green {green_said}; blue {blue.job_name} ({blue.job_id}) is "
            f"{blue.status}, not running"
            + (f": restart it from its latest {latest.kind.lower()} {latest.location}"
               if latest else " and has no completed checkpoint"))

    check_conf() >> copy_cdc_slots >> savepoint_blue >> preflight >> start_green >> health_gate >> approval() >> [
        approve, no_approval_needed] >> stop_blue
    # in place, the promotion's own checks (trust, fencing, every source's and sink's consent,
    # checksums) and green's earlier restore of blue's savepoint stand in for the final
    # pre-flight: it runs only before a resubmit, off the output gap of the in-place path
    stop_blue >> fenced >> promote_green >> needs_resubmit
    needs_resubmit >> preflight_final >> end_validation >> go_live
    # every failure once green may run ends green: also a failed cut-over (stop_blue, the
    # final pre-flight, ending the validation run); a no-op when green already ended
    [preflight, start_green, health_gate, approve, stop_blue, preflight_final, promote_green,
     end_validation] >> cancel_green >> keep_blue()
