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

The workflow is :func:`airflow_checkpoint_provider.workflows.blue_green_upgrade`; this file
fixes its arguments (a DAG of your own calls it the same way with your pipelines). A run's
conf chooses among what this file fixes: green's pipeline (``PIPELINES``), job names (any
name: the example family's jobs, ``allowed_owner_dags``), modes, bounded numbers, the
pipelines' options within ``JOB_ENV``'s bounds, and a savepoint directory under
``SAVEPOINT_ROOTS`` (the example's ``$CKPT_EXAMPLE_DIR/savepoints``
and the deployment's ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``, read in the worker; empty: the job's
own). Task ``check_conf`` checks all of it again in the worker before anything starts
(symlinks resolved). It never names a URL or a directory of the job: the CDC source
(``$CKPT_CDC_URL``), the PostgreSQL sink (``$CKPT_EXAMPLE_PG_URL``) and
``$CKPT_EXAMPLE_DIR`` are the worker's environment, the same for every task of the run.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_checkpoint_provider.params import (
    CDC_ENV,
    EXAMPLE_DAGS,
    EXAMPLE_ENV,
    EXAMPLE_SINK_CONNECTIONS,
    example_savepoint_roots,
)
from airflow_checkpoint_provider.workflows import (
    ConnectionChoice,
    StabilityGate,
    blue_green_upgrade,
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
# the PostgreSQL sinks' database (CKPT_EXAMPLE_PG_URL): empty, or the connection example_pg
SINKS = ConnectionChoice("CKPT_EXAMPLE_PG_URL", EXAMPLE_SINK_CONNECTIONS, param="sink_conn_id",
                         optional=True)

with DAG(
    dag_id="blue_green_upgrade",
    description="start green from blue's savepoint, promote it only if it is healthy",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint", "upgrade"],
    render_template_as_native_obj=True,
) as dag:
    blue_green_upgrade(
        pipelines=PIPELINES, green=f"{EXAMPLE}:build_v2",
        job_names=("versioned-sum-blue", "versioned-sum-green"), any_job_name=True,
        gate=StabilityGate(window_s=60, min_checkpoints=3, min_throughput_ratio=0.8),
        job_env=JOB_ENV, connections=[SINKS], savepoint_roots=SAVEPOINT_ROOTS,
        allowed_owner_dags=EXAMPLE_DAGS)
